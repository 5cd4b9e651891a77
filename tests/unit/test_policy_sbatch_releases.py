"""sbatch's grammar per Slurm release (issue 29): the tables generated from Slurm's source by scripts/gen-sbatch-options.

Facts asserted here were read from the SchedMD/slurm sources at the tags each table names (`git show TAG:...`,
`git log -S`), not guessed: e.g. --export-file was removed in 23.11 (6de1f73975) and restored in 24.05
(286f203d55, a revert); 23.02 still prefixes GRES with `gres:` (gres_prepend_tres_type) while 23.11 uses `gres/`.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from gpuclust.errors import InputError
from gpuclust.policy.sbatch import (
    SbatchRefusal,
    known_versions,
    option_table,
    read_sbatch,
    table_for,
    version_key,
)

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data" / "policy"
TABLES = ROOT / "gpuclust" / "policy" / "sbatch_options"
RELEASES = ["22.05", "23.02", "23.11", "24.05", "24.11", "25.05", "25.11", "26.05"]
MINI = DATA / "slurm-src-mini"


def _generator() -> ModuleType:
    """scripts/gen-sbatch-options as a module (registered first: its dataclasses look themselves up there)."""
    if "gen_sbatch_options" in sys.modules:
        return sys.modules["gen_sbatch_options"]
    loader = importlib.machinery.SourceFileLoader("gen_sbatch_options", str(ROOT / "scripts" / "gen-sbatch-options"))
    spec = importlib.util.spec_from_loader(loader.name, loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[loader.name] = module
    loader.exec_module(module)
    return module


def _json(release: str) -> dict:
    return json.loads((TABLES / f"{release}.json").read_text(encoding="utf-8"))


def _names(release: str) -> set[str]:
    return set(option_table(release).has_arg)


def test_every_release_has_a_table():
    assert known_versions() == RELEASES


@pytest.mark.parametrize("release", RELEASES)
def test_table_loads_and_names_its_source(release):
    table = option_table(release)
    data = _json(release)
    assert table.version == release == data["release"]
    assert data["slurm_version"].startswith(release + ".")
    tag = data["source"]["tag"]
    assert re.fullmatch(r"slurm-(\d\d)-(\d\d)-\d+-\d+", tag)
    assert tag.startswith("slurm-" + release.replace(".", "-") + "-")
    assert re.fullmatch(r"[0-9a-f]{40}", data["source"]["commit"])
    files = data["source"]["files"]
    for path in ("META", "src/common/slurm_opt.c", "src/sbatch/opt.c", "src/plugins/job_submit/lua/job_submit_lua.c"):
        assert re.fullmatch(r"[0-9a-f]{40}", files[path]), path
    assert any(p.endswith("gres.c") for p in files)
    # every short letter names a long option of the same arity
    for letter, (has_arg, long_name) in table.short.items():
        assert long_name in table.has_arg, letter
        assert table.has_arg[long_name] == has_arg, letter
    assert {"account", "gres", "gpus", "nodes", "ntasks", "wrap"} <= set(table.has_arg)
    assert "num_tasks" in data["job_desc_fields"] and "tres_per_node" in data["job_desc_fields"]


@pytest.mark.parametrize("release", ["22.05", "24.11", "26.05"])
def test_source_tables_equal_the_probed_binaries(release):
    """The lab's sbatch (22.05.8, 24.11.5, 26.05.5), probed option by option, has exactly the table read from source."""
    probed = json.loads((DATA / f"sbatch-options-{release}.json").read_text(encoding="utf-8"))
    table = option_table(release)
    assert {o["name"]: o["has_arg"] for o in probed["long"]} == dict(table.has_arg)
    assert {s["letter"]: (s["has_arg"], s["long"]) for s in probed["short"]} == dict(table.short)


@pytest.mark.parametrize("option,present", [
    ("tres-per-task", ["23.02", "23.11", "24.05", "24.11", "25.05", "25.11", "26.05"]),
    ("export-file", ["22.05", "23.02", "24.05", "24.11", "25.05", "25.11", "26.05"]),   # gone in 23.11 only
    ("power", ["22.05", "23.02", "23.11"]),
    ("tres-bind", ["23.11", "24.05", "24.11", "25.05", "25.11", "26.05"]),
    ("oom-kill-step", ["24.11", "25.05", "25.11", "26.05"]),
    ("external", ["25.05", "25.11", "26.05"]),
    ("spread-segments", ["25.11", "26.05"]),
    ("mem-update", ["26.05"]),
])
def test_options_appear_and_disappear_by_release(option, present):
    assert [r for r in RELEASES if option in _names(r)] == present


def test_profiles_per_release():
    prefix = {r: option_table(r).profile.gres_prefix for r in RELEASES}
    assert prefix["22.05"] == prefix["23.02"] == "gres:"
    assert all(prefix[r] == "gres/" for r in RELEASES[2:])
    assert [r for r in RELEASES if option_table(r).profile.escaped_space] == RELEASES[3:]
    assert [r for r in RELEASES if option_table(r).profile.tres_per_task_eq] == RELEASES[2:]
    assert [r for r in RELEASES if option_table(r).profile.ntasks_from_per_node] == ["22.05"]
    assert [r for r in RELEASES if option_table(r).profile.cpus_per_gpu_needs_gpu] == RELEASES[1:]


@pytest.mark.parametrize("given,release", [
    ("23.02", "23.02"), ("23.02.7", "23.02"), ("24.05.1", "24.05"), ("slurm 25.11.0", "25.11"),
    ("slurm-wlm 22.05.8", "22.05"), ("26.05.5", "26.05"),
])
def test_version_selects_that_release(given, release):
    assert version_key(given) == release
    assert option_table(given).version == release


@pytest.mark.parametrize("given", ["21.08", "27.05", "23.05.1", "20.11"])
def test_unknown_release_is_refused_by_name(given):
    with pytest.raises(InputError) as exc:
        version_key(given)
    text = str(exc.value)
    assert f"Slurm {given[:5]} is not a release" in text
    assert ", ".join(RELEASES) in text


def test_detected_version_falls_back_to_the_newest_older_table():
    assert table_for("slurm 23.11.4") == "23.11"
    assert table_for("slurm 27.05.0") == "26.05"
    assert table_for("sbatch: no version") == "22.05"


def _refusal(args: list[str], release: str) -> str:
    with pytest.raises(SbatchRefusal) as exc:
        read_sbatch(["--wrap=true", *args], version=release)
    return str(exc.value)


GRES_GPN = "--gpus-per-node and --gres=gpu are mutually exclusive."


def test_26_05_refuses_gres_gpu_with_gpus_per_node():
    assert GRES_GPN in _refusal(["--gres=gpu:2", "--gpus-per-node=2"], "26.05")
    assert GRES_GPN in _refusal(["--gpus-per-node=h100:2", "--gres=gpu:h100:2"], "26.05")
    # from the script's #SBATCH lines as well
    with pytest.raises(SbatchRefusal, match=re.escape(GRES_GPN)):
        read_sbatch(["job.sh"], script="#!/bin/sh\n#SBATCH --gres=gpu:1\n#SBATCH --gpus-per-node=1\ntrue\n",
                    version="26.05")
    # --gres=none, or another GRES, is not a GPU request by --gres
    read_sbatch(["--wrap=true", "--gres=none", "--gpus-per-node=1"], version="26.05")
    read_sbatch(["--wrap=true", "--gres=nic:1", "--gpus-per-node=1"], version="26.05",
                gres_names=frozenset({"gpu", "nic"}))


@pytest.mark.parametrize("release", RELEASES[:-1])
def test_gres_gpu_with_gpus_per_node_is_read_before_26_05(release):
    job = read_sbatch(["--wrap=true", "--gres=gpu:1", "--gpus-per-node=2"], version=release).job_desc
    pre = option_table(release).profile.gres_prefix
    assert job["tres_per_node"] == f"{pre}gpu:2,{pre}gpu:1"


@pytest.mark.parametrize("release", RELEASES)
def test_mem_options_are_mutually_exclusive(release):
    assert "--mem, --mem-per-cpu, and --mem-per-gpu are mutually exclusive." in _refusal(
        ["--mem=1G", "--mem-per-cpu=1G"], release)
    read_sbatch(["--wrap=true", "--mem=1G", "--mem=2G"], version=release)


@pytest.mark.parametrize("release", RELEASES)
def test_exclusive_with_oversubscribe(release):
    args = ["--wrap=true", "--exclusive", "-s"]
    if release == "22.05":  # the check came in 23.02
        assert read_sbatch(args, version=release).job_desc["shared"] == 1
        return
    assert "--exclusive and --oversubscribe options are mutually exclusive" in _refusal(args[1:], release)


@pytest.mark.parametrize("release", RELEASES)
def test_ntasks_per_gpu_conflicts(release):
    message = _refusal(["--ntasks-per-gpu=2", "--gpus-per-task=1"], release)
    assert "--gpus-per-task is mutually exclusive with --ntasks-per-gpu and SLURM_NTASKS_PER_GPU" in message
    message = _refusal(["--ntasks-per-gpu=2", "--ntasks-per-node=1", "--gpus=2"], release)
    assert "--ntasks-per-node is mutually exclusive with --ntasks-per-gpu" in message


@pytest.mark.parametrize("release,message", [
    ("22.05", "--cpus-per-gpu is mutually exclusive with --cpus-per-task"),
    ("23.02", "--cpus-per-gpu is mutually exclusive with --cpus-per-task"),
    ("23.11", "--cpus-per-task, --tres-per-task=cpu:#, and --cpus-per-gpu are mutually exclusive"),
    ("26.05", "--cpus-per-task, --tres-per-task=cpu:#, and --cpus-per-gpu are mutually exclusive"),
])
def test_cpus_per_task_with_cpus_per_gpu_in_each_release_s_words(release, message):
    assert message in _refusal(["--cpus-per-gpu=2", "-c", "2", "--gpus=1"], release)


@pytest.mark.parametrize("release,message", [
    ("23.02", "You can not have --tres-per-task=gres:gpu: and --gpus-per-task please use one or the other"),
    ("23.11", "You can not have --tres-per-task=gres/gpu: and gpus-per-task please use one or the other"),
    ("24.11", "You can not have --tres-per-task=gres/gpu= and --gpus-per-task please use one or the other"),
])
def test_tres_per_task_with_gpus_per_task(release, message):
    assert message in _refusal(["--tres-per-task=gres/gpu:1", "--gpus-per-task=1"], release)


@pytest.mark.parametrize("release,message", [
    ("23.02", "You can not have --tres-per-task=cpu: and -c please use one or the other"),
    ("23.11", "You can not have --tres-per-task=cpu: and -c please use one or the other"),
    # checked against the 24.11.5 binary: 24.05+ look for "cpu" anywhere in tres_per_task
    ("24.11", "You can not have --tres-per-task=cpu= and --cpus-per-task please use one or the other"),
])
def test_tres_per_task_cpu_with_cpus_per_task(release, message):
    assert message in _refusal(["--tres-per-task=cpu:2", "-c", "2"], release)


def test_tres_per_task_names_the_gpu_type_from_24_05():
    assert ("You can not have --tres-per-task=gres/gpu:h100= and --gpus-per-task please use one or the other"
            in _refusal(["--tres-per-task=gres/gpu:h100=1", "--gpus-per-task=h100:1"], "24.11"))


def test_rules_are_in_each_release_s_check_order():
    ids = [r.id for r in option_table("26.05").rules]
    assert ids[0] == "gres_vs_gpus_per_node"
    assert ids.index("mem_exclusive") < ids.index("exclusive_vs_oversubscribe")
    assert "gres_vs_gpus_per_node" not in [r.id for r in option_table("25.11").rules]
    assert "exclusive_vs_oversubscribe" not in [r.id for r in option_table("22.05").rules]


def test_generator_reads_a_trimmed_source_tree():
    """Verbatim pieces of 26.05.3's source: the expected table was checked by hand (srun-only --accel-bind and an
    envvar-only option left out, --ntasks-per-node/--tasks-per-node one getopt val, --wrap in the early pass)."""
    gen = _generator()
    table = gen.generate(gen.Source(root=MINI))
    assert gen.render(table) == (MINI / "expected-table.json").read_text(encoding="utf-8")
    names = {o["name"]: o for o in table["long"]}
    assert "accel-bind" not in names
    assert names["ntasks-per-node"]["aliases"] == ["tasks-per-node"]
    assert names["wrap"]["early_pass"] is True
    assert [r["id"] for r in table["rules"]] == ["gres_vs_gpus_per_node", "mem_exclusive", "exclusive_vs_oversubscribe"]


def test_generator_refuses_a_tree_that_is_not_slurm(tmp_path):
    gen = _generator()
    with pytest.raises(gen.SourceError, match="META"):
        gen.generate(gen.Source(root=tmp_path))
    assert gen.main([str(tmp_path), "--stdout"]) == 2


def _mirror() -> Path | None:
    for candidate in (os.environ.get("SLURM_GIT_DIR"), "/work/.mirror/SchedMD+slurm/repo"):
        if candidate and Path(candidate).is_dir():
            return Path(candidate)
    return None


@pytest.mark.parametrize("release", RELEASES)
def test_generator_reproduces_the_committed_table(release):
    """Needs a SchedMD/slurm git directory (SLURM_GIT_DIR); CI has none, so this skips there."""
    git_dir = _mirror()
    if git_dir is None:
        pytest.skip("no Slurm git directory (set SLURM_GIT_DIR)")
    tag = _json(release)["source"]["tag"]
    has_tag = subprocess.run(["git", "--git-dir", str(git_dir), "rev-parse", "-q", "--verify", tag + "^{commit}"],
                             capture_output=True, check=False)
    if has_tag.returncode:
        pytest.skip(f"{git_dir} has no tag {tag}")
    gen = _generator()
    fresh = gen.render(gen.generate(gen.Source(git_dir=git_dir, tag=tag)))
    assert fresh == (TABLES / f"{release}.json").read_text(encoding="utf-8")


@pytest.mark.parametrize("release", RELEASES)
def test_every_option_of_every_release_is_read_or_refused(release):
    """Each long option of the release once, in both spellings: read, or refused as sbatch would (no traceback)."""
    table = option_table(release)
    for name, has_arg in table.has_arg.items():
        if name in ("help", "usage", "version", "wrap", "test-only"):
            continue
        for args in ([f"--{name}"] if has_arg == "none" else [f"--{name}=1", f"--{name}", "2"]), [f"--{name}=x"]:
            try:
                read_sbatch(["--wrap=true", *args], version=release)
            except SbatchRefusal as exc:
                assert exc.problems and exc.problems[0].message


def test_23_02_tres_per_task_as_given_and_cpu_is_cpus_per_task():
    """23.02 slurm_opt.c: job_desc.tres_per_task = --tres-per-task as given, plus xfmt_tres("gres:gpu", --gpus-per-task)
    unless it names gres:gpu; `cpu:N` in it sets cpus_per_task (_validate_tres_per_task). 23.11 folds instead."""
    job = read_sbatch(["--wrap=true", "--tres-per-task=cpu:2", "--gpus-per-task=1"], version="23.02").job_desc
    assert (job["tres_per_task"], job["cpus_per_task"]) == ("cpu:2,gres:gpu:1", 2)
    job = read_sbatch(["--wrap=true", "--gpus-per-task=1"], version="23.02").job_desc
    assert job["tres_per_task"] == "gres:gpu:1"
    assert "Invalid --tres-per-task=cpu:0" in _refusal(["--tres-per-task=cpu:0"], "23.02")
    job = read_sbatch(["--wrap=true", "--gpus-per-task=1", "-c", "2"], version="23.11").job_desc
    assert job["tres_per_task"] == "cpu=2,gres/gpu=1"
