"""The pyslurm backend without pyslurm (issue 29 part 4): how it is chosen (--backend, [slurm] backend), that it
refuses cleanly, naming what to do, where pyslurm is missing or built for another Slurm, that the CLI never
imports it at start-up, and how a pyslurm Node maps to the audit's NodeRecord (with a stand-in for pyslurm's
objects). That it gives the CLI backend's records on a real cluster is tests/integration/test_pyslurm_lab.py."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
import types
from datetime import datetime, timezone
from pathlib import Path

import pytest
from click.testing import CliRunner

import gpuclust.audit.collect as col
from gpuclust.cli.context import AppContext
from gpuclust.cli.main import cli
from gpuclust.config import parse_config
from gpuclust.errors import ConfigError
from gpuclust.slurm.client import CommandSlurmClient, NodeObjectSource, SlurmClient
from gpuclust.slurm.parse import Gres
from gpuclust.slurm.pyslurm_backend import (
    PyslurmRPCError,
    PyslurmSlurmClient,
    PyslurmUnavailable,
    node_object,
    release_of,
)
from tests.unit.audit_replay import replay

REPO = Path(__file__).resolve().parents[2]
V2205 = (22, 5, 8)


@pytest.fixture
def no_pyslurm(monkeypatch):
    monkeypatch.setitem(sys.modules, "pyslurm", None)  # `import pyslurm` raises ImportError


def fake_node(name: str, **kw) -> types.SimpleNamespace:
    base = dict(name=name, state="IDLE", reason=None, reason_time=None, reason_user=None,
                configured_gres={"gpu:h100": 4}, allocated_gres={"gpu:h100": {"count": "0", "indexes": "N/A"}},
                total_cpus=8, effective_cpus=8, allocated_cpus=0, real_memory=16000, available_features=["gpu", "h100"], slurm_version="22.05.8",
                partitions=["gpu", "debug"])
    base.update(kw)
    return types.SimpleNamespace(**base)


def fake_pyslurm(nodes, version: str = "22.5.3", legacy: dict | None = None, fail: bool = False):
    mod = types.ModuleType("pyslurm")

    class RPCError(Exception):
        pass

    class Nodes:
        @staticmethod
        def load():
            if fail:
                raise RPCError("Unable to contact slurm controller (connect failure)")
            return {n.name: n for n in nodes}

    mod.__version__ = version  # type: ignore[attr-defined]
    mod.RPCError = RPCError  # type: ignore[attr-defined]
    mod.Nodes = Nodes  # type: ignore[attr-defined]
    if legacy is not None:
        mod.node = lambda: types.SimpleNamespace(get=lambda: legacy)  # type: ignore[attr-defined]
    return mod


# ---- refusing cleanly --------------------------------------------------------------------------------------

def test_missing_pyslurm_is_refused_with_what_to_do(no_pyslurm):
    client = PyslurmSlurmClient(replay("clean"), origin="--backend pyslurm")
    with pytest.raises(PyslurmUnavailable) as info:
        client.node_objects(V2205)
    msg = str(info.value)
    assert msg.startswith("--backend pyslurm: pyslurm is not importable")
    assert "scripts/test-pyslurm" in msg and "--backend cli" in msg
    assert isinstance(info.value, ConfigError)  # exit 2, and UNKNOWN (3) in the Nagios commands


def test_pyslurm_linked_to_a_gone_libslurm_is_another_slurm(monkeypatch):
    def boom(name):
        raise ImportError("libslurm.so.38: cannot open shared object file: No such file or directory")

    monkeypatch.setattr(importlib, "import_module", boom)
    with pytest.raises(PyslurmUnavailable, match="built for another Slurm: libslurm.so.38"):
        PyslurmSlurmClient(replay("clean")).node_objects(V2205)


def test_pyslurm_for_another_release_is_refused(monkeypatch):
    monkeypatch.setitem(sys.modules, "pyslurm", fake_pyslurm([], version="24.11.0"))
    with pytest.raises(PyslurmUnavailable, match=r"pyslurm 24\.11\.0 was built for another Slurm than this one "
                                                 r"\(22\.05, from scontrol --version\)"):
        PyslurmSlurmClient(replay("clean")).node_objects(V2205)


def test_rpc_failure_is_a_slurm_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "pyslurm", fake_pyslurm([], fail=True))
    with pytest.raises(PyslurmRPCError, match="Unable to contact slurm controller"):
        PyslurmSlurmClient(replay("clean")).node_objects(V2205)


def test_audit_with_backend_pyslurm_and_no_pyslurm_is_unknown(no_pyslurm, tmp_path):
    conf = tmp_path / "site.conf"
    conf.write_text("[site]\ncluster_name = lab\n[slurm]\nbackend = pyslurm\n")
    for extra, origin in (([], f"{conf}: [slurm] backend = pyslurm"), (["--backend", "pyslurm"], "--backend pyslurm")):
        app = AppContext(client_factory=lambda timeout: replay("clean"))
        res = CliRunner().invoke(cli, ["--config", str(conf), *extra, "audit", "partition", "gpu", "--json"],
                                 obj=app)
        assert res.exit_code == 3, res.output
        assert res.output.startswith(f"UNKNOWN - {origin}: pyslurm is not importable"), res.output


def test_cli_backend_and_explicit_sources_never_import_pyslurm(no_pyslurm):
    for source in ("text", "json"):  # --source text/json read the commands even with the pyslurm backend
        snap = col.collect_snapshot(PyslurmSlurmClient(replay("degraded")), source)
        assert snap.node_source in ("text", "sinfo-json")


# ---- choosing it -------------------------------------------------------------------------------------------

SITE = "[site]\ncluster_name = lab\n"


def test_config_key():
    assert parse_config(SITE).slurm_backend == "cli"
    assert parse_config(SITE + "[slurm]\nbackend = pyslurm\n", "s.conf").slurm_backend == "pyslurm"
    with pytest.raises(ConfigError, match=r"s\.conf:4: \[backend\] \[slurm\] backend: expected one of cli, "
                                          r"pyslurm, got 'pyslrum'"):
        parse_config(SITE + "[slurm]\nbackend = pyslrum\n", "s.conf")


def test_context_picks_the_backend(tmp_path):
    conf = tmp_path / "site.conf"
    conf.write_text(SITE + "[slurm]\nbackend = pyslurm\n")
    factory = lambda timeout: CommandSlurmClient(timeout=timeout)  # noqa: E731
    app = AppContext(config_path=str(conf), client_factory=factory)
    assert app.slurm_backend() == ("pyslurm", f"{conf}: [slurm] backend = pyslurm")
    assert isinstance(app.slurm, PyslurmSlurmClient) and isinstance(app.slurm, NodeObjectSource)
    assert isinstance(app.slurm, SlurmClient) and isinstance(app.slurm.cli, CommandSlurmClient)
    assert app.slurm.sacct_version == app.slurm.cli.sacct_version  # beyond the protocol: the CLI client's
    over = AppContext(config_path=str(conf), client_factory=factory, backend="cli")
    assert over.slurm_backend() == ("cli", "--backend cli") and isinstance(over.slurm, CommandSlurmClient)
    none = AppContext(config_path=str(tmp_path / "missing.conf"), client_factory=factory)
    assert none.slurm_backend()[0] == "cli"
    assert not isinstance(CommandSlurmClient(), NodeObjectSource)


def test_cli_never_imports_pyslurm_at_startup(tmp_path):
    """A pyslurm that explodes on import: --help, and a command the backend does not serve, still work."""
    fake = tmp_path / "pyslurm"
    fake.mkdir()
    (fake / "__init__.py").write_text("raise RuntimeError('pyslurm imported at startup')\n")
    code = ("import sys; from gpuclust.cli.main import cli\n"
            "try:\n    cli.main(sys.argv[1:], prog_name='gpuclust')\nexcept SystemExit as e:\n    print(e.code)\n"
            "print(json.dumps('pyslurm' in sys.modules))")
    for argv in (["--backend", "pyslurm", "--help"], ["--backend", "pyslurm", "config", "example"]):
        cp = subprocess.run([sys.executable, "-c", "import json\n" + code, *argv], capture_output=True, text=True,
                            cwd=REPO, env={"PYTHONPATH": f"{tmp_path}:{REPO}", "PATH": "/usr/bin:/bin"},
                            timeout=120)
        assert cp.returncode == 0, cp.stderr
        assert cp.stdout.strip().splitlines()[-1] == "false", (argv, cp.stdout[-300:])
        assert json.loads(cp.stdout.strip().splitlines()[-2]) in (0, None)


# ---- the mapping -------------------------------------------------------------------------------------------

def test_node_maps_to_the_records_of_the_text_source(monkeypatch):
    when = datetime(2026, 12, 5, 18, 40, 1, tzinfo=timezone.utc)
    nodes = [
        fake_node("node1", allocated_gres={}),  # pyslurm.Nodes of 22.5 (no SHOW_DETAIL): GresUsed from node()
        fake_node("node2", state="IDLE+DRAIN", reason="GPU 2 ECC double-bit errors", reason_user="root",
                  reason_time=int(when.timestamp())),
        fake_node("node3", state="DOWN+NOT_RESPONDING", reason="PSU failure", reason_user="root",
                  reason_time=int(when.timestamp())),
        fake_node("node4", state="ALLOCATED", allocated_cpus=1, configured_gres={"gpu:h100": 2},
                  allocated_gres={"gpu:h100": {"count": "1", "indexes": "0"}}),
    ]
    legacy = {"node1": {"gres": ["gpu:h100:4(S:0-1)"], "gres_drain": "N/A", "gres_used": ["gpu:h100:0(IDX:N/A)"]},
              "node4": {"gres": ["gpu:h100:2(S:0)"], "gres_drain": "gpu:h100:1"}}
    monkeypatch.setitem(sys.modules, "pyslurm", fake_pyslurm(nodes, legacy=legacy))
    client = PyslurmSlurmClient(replay("clean"))
    snap = col.collect_snapshot(client, accounting=False)
    assert snap.node_source == "pyslurm" and not snap.notes
    n1, n2, n3, n4 = (snap.nodes[f"node{i}"] for i in range(1, 5))
    assert n1.gres == (Gres("gpu", "h100", 4, "S:0-1"),) and n1.gres_used == (Gres("gpu", "h100", 0),)
    assert n1.gres_drained == () and n1.partitions == ("gpu", "debug") and n1.features == ("gpu", "h100")  # partitions in Slurm's order
    assert (n1.cpus, n1.real_memory_mb, n1.version, n1.state_text) == (8, 16000, "22.05.8", "IDLE")
    assert (n2.state_text, n2.reason, n2.reason_user, n2.reason_time) == (
        "IDLE+DRAIN", "GPU 2 ECC double-bit errors", "root", when)
    assert n2.is_drain and n3.is_down and n3.flags == {"NOT_RESPONDING"}
    assert n2.gres == (Gres("gpu", "h100", 4),)  # no legacy dict: pyslurm.Node's GRES, without socket detail
    assert n4.gres_used == (Gres("gpu", "h100", 1, "IDX:0"),) and n4.gpus_drained == 1
    assert n4.state == "MIXED"  # 1 of 8 CPUs allocated: MIXED, as scontrol prints it


def test_fully_allocated_stays_allocated_and_flags_are_kept():
    full = fake_node("n", state="ALLOCATED+DRAIN", allocated_cpus=8)
    part = fake_node("n", state="ALLOCATED+DRAIN", allocated_cpus=2)
    assert node_object(full)["state"] == "ALLOCATED+DRAIN" and node_object(part)["state"] == "MIXED+DRAIN"


def test_node_object_without_reason_has_no_user():
    obj = node_object(fake_node("node1", reason_user="root", reason_time=0))
    assert obj["reason"] is None and obj["reason_set_by_user"] is None and obj["gres"] == "gpu:h100:4"


@pytest.mark.parametrize(("text", "release"), [("22.5.3", (22, 5)), ("24.11.0", (24, 11)), ("22.05.8", (22, 5)),
                                               ("x", None)])
def test_release_of(text, release):
    assert release_of(text) == release
