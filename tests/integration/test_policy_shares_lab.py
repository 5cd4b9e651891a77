"""GPU-equivalents and the newest submit-policy rules in a real slurmctld (issue 44 part 3, issue 47): MIG requests
on the lab's partition mig (node5: gpu:1g.10gb:4 + gpu:3g.40gb:1), shard requests on partition shared (node6:
shard:16 over 2 GPUs) under `count_gpus = equivalents`, an unknown MIG profile, and the rules
partition_cpus_per_gpu, partition_mem_per_gpu and partition_qos (tests/data/policy/lab-share-site.conf).

Each row is submitted (held) through the rendered policy plus test_policy_lab's recording wrapper, and checked
three ways: the engine inside slurmctld equals the Python twin on the job_desc slurmctld presented; what sbatch
printed is the engine's message; `gpuclust policy check` on the same sbatch line decides the same (rc, rule,
message), builds the same GPU / memory / QOS fields, and its log lines are the ones slurmctld.log got.
Written for any lab version (22.05 writes `gres:` in job_desc, 24.11 `gres/`; the engine and reader take both).
Also: --mem / --mem-per-cpu read as the lab's sbatch reads them (refusals and the job_desc values).
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from gpuclust.cli.main import cli
from gpuclust.config import load_config
from gpuclust.policy.compile import compile_policy
from gpuclust.policy.evaluate import Evaluator
from gpuclust.policy.render import render_lua
from gpuclust.policy.sbatch import job_desc_from_options
from tests.integration.labutil import SLURM_LAB, run_cmd
from tests.integration.test_policy_lab import _FIELDS, recording_wrapper
from tests.integration.test_policy_rules_lab import lab_version, reader_says, sbatch_says

pytestmark = pytest.mark.slurm

REPO = Path(__file__).resolve().parent.parent.parent
CONF = REPO / "tests" / "data" / "policy" / "lab-share-site.conf"
FIELDS = (*_FIELDS, "cpus_per_task", "cpus_per_tres", "mem_per_tres", "min_mem_per_node", "min_mem_per_cpu")
# what `policy check` builds must equal what slurmctld presented, field by field
SAME_FIELDS = ("partition", "qos", "default_qos", "tres_per_node", "tres_per_job", "tres_per_task", "cpus_per_tres",
               "mem_per_tres", "min_mem_per_node", "min_mem_per_cpu")
HELD = ["--parsable", "--hold", "-o", "/dev/null", "-t", "5"]


@dataclass(frozen=True)
class Row:
    args: tuple[str, ...]
    rule: str  # the verdict slurmctld and policy check must give
    default_qos: str | None = None  # the association's DefaultQOS (sacctmgr): what job_desc.default_qos shows
    text: str | None = None  # in the refusal message


PHYS = ("-A", "physics")
ROWS: dict[str, Row] = {
    # partition mig: at most 1 GPU-equivalent; a 3g.40gb is 3/7 of the card, a 1g.10gb 1/7
    "mig 3g.40gb + 1g.10gb": Row((*PHYS, "-p", "mig", "--gres=gpu:3g.40gb:1,gpu:1g.10gb:1"), "ok", "normal"),
    "mig --gpus 1g.10gb:2": Row((*PHYS, "-p", "mig", "--gpus=1g.10gb:2"), "ok", "normal"),
    "mig 8/7 over": Row((*PHYS, "-p", "mig", "--gres=gpu:3g.40gb:1,gpu:1g.10gb:5"), "partition_max_gpus", "normal",
                        "job asks for 1.14 GPU-equivalents"),
    "mig unknown profile": Row((*PHYS, "-p", "mig", "--gres=gpu:5g.50gb:1"), "mig_profile", "normal",
                               "unknown MIG profile '5g.50gb'"),
    "mig profile over the card": Row((*PHYS, "-p", "mig", "--gpus=8g.80gb:1"), "mig_profile", "normal",
                                     "MIG profile '8g.80gb' asks for 8 compute slices"),
    # partition shared: 8 shards a GPU, at most 1 GPU-equivalent; only QOS gpu-normal
    "shard 8": Row((*PHYS, "-p", "shared", "--qos=gpu-normal", "--gres=shard:8"), "ok", "normal"),
    "shard 12 over": Row((*PHYS, "-p", "shared", "--qos=gpu-normal", "--gres=shard:12"), "partition_max_gpus",
                         "normal", "job asks for 1.50 GPU-equivalents"),
    # partition gpu: at most 2 CPUs and 4G per GPU
    "cpus per gpu 2": Row((*PHYS, "--gres=gpu:h100:2", "-c", "4"), "ok", "normal"),
    "cpus per gpu 4": Row((*PHYS, "--gres=gpu:h100:1", "-n", "2", "-c", "2"), "partition_cpus_per_gpu", "normal",
                          "job asks for 4 CPUs per GPU"),
    "mem 4G per gpu": Row((*PHYS, "--gres=gpu:h100:1", "--mem=4G"), "ok", "normal"),
    "mem-per-cpu 2 x 3G per gpu": Row((*PHYS, "--gres=gpu:h100:1", "-c", "2", "--mem-per-cpu=3G"),
                                      "partition_mem_per_gpu", "normal", "job asks for 6144 MB of memory per GPU"),
    "mem=0": Row((*PHYS, "--gres=gpu:h100:1", "--mem=0"), "partition_mem_per_gpu", "normal", "(--mem=0)"),
    "mem-per-gpu 5G": Row((*PHYS, "--gpus-per-node=h100:1", "--mem-per-gpu=5G"), "partition_mem_per_gpu", "normal",
                          "job asks for 5120 MB"),
    # QOS: shared allows gpu-normal; physics' DefaultQOS is normal; root's association has no DefaultQOS
    "qos allowed": Row((*PHYS, "-p", "shared", "--qos=gpu-normal", "--gres=shard:1"), "ok", "normal"),
    "qos not allowed": Row((*PHYS, "-p", "shared", "--qos=normal", "--gres=shard:1"), "partition_qos", "normal",
                           "QOS normal may not be used in partition shared"),
    "default qos not allowed": Row((*PHYS, "-p", "shared", "--gres=shard:1"), "partition_qos", "normal",
                                   "QOS normal may not be used in partition shared"),
    "no qos, no default qos": Row(("-A", "root", "-p", "shared", "--gres=shard:1"), "ok", None),
    # debug: require_qos = yes refuses that job, and takes a visible default QOS
    "require_qos, no default qos": Row(("-A", "root", "-p", "debug"), "partition_qos", None,
                                       "QOS (none) may not be used in partition debug"),
    "require_qos, default qos": Row((*PHYS, "-p", "debug"), "ok", "normal"),
}


class _Log:
    """slurmctld.log from an offset: the text up to and including the next GPCLAB record."""

    def __init__(self, path: Path):
        self.path = path
        self.skip()

    def skip(self) -> None:
        """Forget what is logged so far (--test-only answers may log records too)."""
        self.offset = self.path.stat().st_size

    def next_record(self, timeout: float = 20.0) -> tuple[list[Any] | None, str]:
        deadline = time.monotonic() + timeout
        while True:
            with open(self.path, "rb") as fh:
                fh.seek(self.offset)
                data = fh.read()
            text = data.decode("utf-8", "replace")
            end = text.find("GPCLAB [")
            if end >= 0 and "\n" in text[end:]:
                stop = text.index("\n", end) + 1
                self.offset += len(text[:stop].encode("utf-8", "replace"))
                line = text[end:stop].strip()
                return json.loads(line.split("GPCLAB ", 1)[1]), text[:stop]
            if time.monotonic() > deadline:
                self.offset += len(data)
                return None, text
            time.sleep(0.1)


def _sbatch(args: list[str]) -> subprocess.CompletedProcess[str]:
    cp = run_cmd(["sbatch", *HELD, *args, "--wrap", "true"], check=False, timeout=60)
    if cp.returncode == 0:
        run_cmd(["scancel", cp.stdout.strip().split(";")[0]], check=False, timeout=60)
    return cp


@pytest.fixture(scope="module")
def share_conf(slurm_lab, tmp_path_factory) -> Path:
    text = CONF.read_text().replace("cluster_name = policy", f"cluster_name = {slurm_lab['cluster_name']}")
    path = tmp_path_factory.mktemp("shares") / "lab-share-site.conf"
    path.write_text(text)
    return path


@pytest.fixture(scope="module")
def share_log(slurm_lab, share_conf, tmp_path_factory) -> Iterator[_Log]:
    text = render_lua(compile_policy(load_config(str(share_conf))))
    head, sep, tail = text.rpartition("return slurm.SUCCESS")
    assert sep
    lua = tmp_path_factory.mktemp("lua") / "job_submit.lua"
    lua.write_text(head + recording_wrapper(FIELDS) + sep + tail)
    run_cmd([str(SLURM_LAB), "--name", slurm_lab.name, "policy", str(lua)], timeout=120)
    try:
        # slurmctld reloads the script when its mtime changes (1 s granularity): submit until this policy answers
        deadline = time.monotonic() + 90
        while "[mig_profile]" not in _sbatch(["-p", "mig", "--gres=gpu:9g.90gb:1"]).stderr:
            assert time.monotonic() < deadline, "the share policy never took effect"
            Path(slurm_lab["job_submit_lua"]).touch()
            run_cmd(["scontrol", "reconfigure"], check=False, timeout=60)
            time.sleep(0.5)
        yield _Log(Path(slurm_lab["log_dir"]) / "slurmctld.log")
    finally:
        run_cmd([str(SLURM_LAB), "--name", slurm_lab.name, "policy", "default"], timeout=120)


def _policy_check(conf: Path, args: list[str], default_qos: str | None) -> tuple[int, dict[str, Any]]:
    opts = ["--json", "--user", "root", *(["--default-qos", default_qos] if default_qos else [])]
    res = CliRunner().invoke(cli, ["--config", str(conf), "policy", "check", *opts, "--", *args])
    assert res.exit_code in (0, 1), res.output
    return res.exit_code, json.loads(res.output)


@pytest.mark.parametrize("name", list(ROWS))
def test_row_slurmctld_equals_policy_check(share_log, share_conf, name):
    row = ROWS[name]
    args = list(row.args)
    share_log.skip()
    cp = _sbatch(args)
    rec, logged = share_log.next_record()
    assert rec is not None, (name, cp.stderr)
    _, rc, msg, _uid, desc, _ = rec
    # job_desc as slurmctld presented it: no --qos is nil, default_qos the association's DefaultQOS (nil without)
    assert desc.get("default_qos") == row.default_qos, (name, desc)
    if "--qos" not in " ".join(args):
        assert desc.get("qos") is None, (name, desc)
    # 1. the engine in slurmctld == the Python twin on that job_desc
    policy = compile_policy(load_config(str(share_conf)))
    twin = Evaluator(policy).submit(desc)
    assert (twin.rc, twin.message) == (int(rc), msg), (name, desc, twin, rc, msg)
    assert twin.rule == row.rule, (name, desc, twin)
    if row.text:
        assert row.text in (twin.message or ""), (name, twin.message)
    # 2. what the user saw
    if twin.accepted:
        assert cp.returncode == 0, (name, cp.stderr)
    else:
        assert cp.returncode != 0 and f"sbatch: error: {twin.message}" in cp.stderr, (name, cp.stderr)
    # 3. `gpuclust policy check` on the same line: same verdict, same fields, the log lines slurmctld.log got
    code, out = _policy_check(share_conf, args, row.default_qos)
    assert (code, out["rc"], out["rule"], out["message"]) == (0 if twin.accepted else 1, twin.rc, twin.rule,
                                                              twin.message), (name, out)
    job = out["job_desc"]
    for f in SAME_FIELDS:
        assert job.get(f) == desc.get(f), (name, f, job.get(f), desc.get(f))
    lines = [ln for ln in logged.splitlines() if "GPCLAB [" not in ln]
    expected = Evaluator(policy).log_lines(job, twin)
    for want in expected:
        assert any(ln.endswith(want) for ln in lines), (name, want, lines)
    assert twin.accepted == (not any("gpuclust-policy-reject" in ln for ln in lines)), (name, lines)
    assert len(expected) == (0 if twin.accepted else 2)


# --- --mem and --mem-per-cpu as the lab's sbatch reads them (gpuclust/policy/sbatch.py's _str_to_mbytes) ---

MEM_VALUES = ["0", "1", "010", " 5", "+5", "-0", "-1", "1B", "1b", "0B", "1K", "1025K", "1KB", "1kb", "1Mb", "1GB",
              "1.5G", "10T", "1TB", "1GiB", "1P", "1GX", "1 ", "abc", "", "0x10", "9223372036854775807",
              "9223372036854775808", "99999999999999999999", "18014398509481984G"]


def test_mem_refusals_match_live_sbatch(share_log):
    """sbatch --test-only (-p mig: no rule of the policy applies) refuses a value exactly when the reader does, with
    its message; a value sbatch reads and slurmctld then cannot place (10T) counts as read."""
    version = lab_version()
    bad = []
    for opt in ("--mem", "--mem-per-cpu"):
        for value in MEM_VALUES:
            args = ["-p", "mig", f"{opt}={value}"]
            live, ours = sbatch_says(args), reader_says(args, version)
            if live != ours:
                bad.append(f"{opt}={value!r}: sbatch {live!r}, policy check {ours!r}")
    assert bad == []


@pytest.mark.parametrize("arg", ["--mem=0", "--mem=1025K", "--mem=1Mb", "--mem=010", "--mem=10T",
                                 "--mem=18014398509481984G", "--mem=8796093022208T", "--mem=9223372036854775807K",
                                 "--mem-per-cpu=0", "--mem-per-cpu=2GB", "--mem-per-cpu=8796093022208T"])
def test_mem_job_desc_matches_slurmctld(share_log, arg):
    """The MB job_desc carries (job_submit.lua's min_mem_per_node / min_mem_per_cpu) equal the reader's."""
    share_log.skip()
    cp = _sbatch(["-p", "mig", arg])
    rec, _ = share_log.next_record()
    assert rec is not None, (arg, cp.stderr)
    desc = rec[4]
    job = job_desc_from_options(["--wrap=true", "-p", "mig", arg], version=lab_version())

    def mem(d: dict[str, Any]) -> tuple[float | None, ...]:  # the Lua sees doubles
        return tuple(None if d.get(f) is None else float(d[f]) for f in ("min_mem_per_node", "min_mem_per_cpu"))

    assert mem(job) == mem(desc), (arg, job, desc)
