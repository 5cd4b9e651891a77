"""[costs]/[baseline] validation, the structured rejection line of job_submit.lua and its reader."""

from __future__ import annotations

import gzip
import shutil
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from gpuclust.accounting.history import refusals
from gpuclust.config import parse_config
from gpuclust.errors import ConfigError

REPO = Path(__file__).resolve().parent.parent.parent
DATA = REPO / "tests" / "data" / "economics"
UTC = ZoneInfo("UTC")
SITE = "[site]\ncluster_name = x\n"


def _problems(text: str) -> list[str]:
    with pytest.raises(ConfigError) as exc:
        parse_config(text, "site.conf")
    return [f"{p.file}:{p.line}: {p.message}" for p in exc.value.problems]


def test_costs_and_baselines_parse():
    cfg = parse_config(SITE + "denominator = units\nunits_label = batch\nslurmctld_log = /var/log/slurmctld.log\n"
                       "[account ml]\nunits_per_job = 128\n"
                       "[costs]\ncurrency = EUR\nnetwork = 730\nstorage = 1.5\ncompute_per_month = 1000\n"
                       "[baseline cloud]\nkind = gpu_hour\nprice_per_gpu_hour.h100 = 4\nspeed = 1.25\n"
                       "[baseline api]\nkind = unit\nprice_per_unit = 0.5\n", "site.conf")
    e = cfg.economics
    assert e.currency == "EUR" and e.costs.network == 730 and e.costs.support == 0 and e.costs.compute_per_month == 1000
    assert e.denominator == "units" and e.units_label == "batch" and e.units_per_job == {"ml": 128}
    assert e.slurmctld_log == "/var/log/slurmctld.log"
    assert e.baselines["cloud"].gpu_hour_price("h100") == 4 and e.baselines["cloud"].gpu_hour_price("a100") is None
    assert e.baselines["cloud"].speed == 1.25 and e.baselines["api"].price_per_unit == 0.5


def test_cost_without_currency_names_file_and_line():
    assert _problems(SITE + "[costs]\nnetwork = 100\n") == [
        "site.conf:4: [costs] network is set but [costs] has no currency; add currency = EUR (or USD, ...)"]


def test_negative_cost_names_file_and_line():
    problems = _problems(SITE + "[costs]\ncurrency = EUR\n\nstorage = -5\n")
    assert len(problems) == 1 and problems[0].startswith("site.conf:6: [costs] storage: must be a finite number >= 0")


def test_baseline_errors():
    problems = _problems(SITE + "[costs]\ncurrency = USD\n[baseline a]\nkind = gpu_hour\nprice_per_unit = 3\n"
                         "[baseline b]\nkind = unit\n[baseline c]\nkind = rent\n[baseline d]\nkind = gpu_hour\n"
                         "price_per_gpu_hour = 2\nspeed = 0\n")
    assert "site.conf:7: [baseline a] price_per_unit does not apply to kind = gpu_hour" in problems
    assert "site.conf:5: [baseline a] kind = gpu_hour needs price_per_gpu_hour or price_per_gpu_hour.TYPE" in problems
    assert "site.conf:8: [baseline b] kind = unit needs price_per_unit" in problems
    assert any(p.startswith("site.conf:11: [baseline c] kind: expected one of gpu_hour, unit") for p in problems)
    assert "site.conf:15: [baseline d] speed must be > 0" in problems


def test_baseline_needs_a_currency():
    assert _problems(SITE + "[baseline api]\nkind = unit\nprice_per_unit = 1\n") == [
        "site.conf:3: [baseline api] has prices but [costs] has no currency; add a [costs] section with "
        "currency = EUR (or USD, ...)"]


# ---- the log line: written by the rendered Lua, read by refusals.py --------------------------------------

REAL_LINE = ("[2026-12-03T09:06:16.148] lua: gpuclust-policy-reject v1 op=submit rule=partition_account "
             "account=physics user=root partition=a100 gpus=1")  # recorded: lab econ, slurmctld 22.05


def test_reads_the_recorded_line():
    r = refusals.parse_line(REAL_LINE + "\n", UTC)
    assert r is not None
    assert (r.op, r.rule, r.account, r.user, r.partition, r.gpus) == ("submit", "partition_account", "physics", "root",
                                                                      "a100", 1)
    assert r.time == 1796288776.148


@pytest.mark.parametrize("line", [
    "[2026-12-03T09:06:16.116] lua: slurm_job_submit: gpuclust policy [account_missing]: no account given",
    "[2026-12-03T09:03:54.132] error: Could not open job state file",
    "",
])
def test_other_lines_are_not_refusals(line):
    assert refusals.parse_line(line, UTC) is None


@pytest.mark.parametrize("line", [
    "[2026-12-03T09:06:16.148] lua: gpuclust-policy-reject v2 op=submit rule=x",
    "[2026-12-03T09:06:16.148] lua: gpuclust-policy-reject v1 op=submit rule=x account=a b",
    "[2026-12-03T09:06:16.148] lua: gpuclust-policy-reject v1 op=submit account=a",
    "gpuclust-policy-reject v1 rule=x",
])
def test_broken_marker_lines_are_errors(line):
    with pytest.raises(ValueError):
        refusals.parse_line(line, UTC)


def test_offset_and_local_time():
    line = REAL_LINE.replace("09:06:16.148]", "10:06:16.148+01:00]")
    assert refusals.parse_line(line, UTC).time == 1796288776.148  # type: ignore[union-attr]
    berlin = refusals.parse_line(REAL_LINE.replace("09:06:16.148]", "10:06:16.148]"), ZoneInfo("Europe/Berlin"))
    assert berlin is not None and berlin.time == 1796288776.148


def _lua_policy(extra: str = ""):
    pytest.importorskip("lupa")
    from gpuclust.policy.compile import compile_policy
    from gpuclust.policy.luasim import LuaPolicy
    from gpuclust.policy.render import render_lua

    cfg = parse_config(SITE + "[partition gpu]\nmax_gpus_per_job = 2\n[account ml]\n[policy]\nrequire_account = yes\n"
                       "default_partition = gpu\n" + extra, "site.conf")
    return LuaPolicy(render_lua(compile_policy(cfg)))


def _logged(policy) -> list[str]:
    return [line for line in str(policy.eval("gpuclust_sim_infos()")).split("\n") if "gpuclust-policy-reject" in line]


def test_lua_logs_one_line_per_rejection_and_python_reads_it_back():
    policy = _lua_policy()
    res = policy.submit({"user_name": "bob smith", "account": "ml", "partition": "gpu",
                         "tres_per_job": "gres:gpu:3"})
    assert not res.accepted
    lines = _logged(policy)
    assert lines == ["gpuclust-policy-reject v1 op=submit rule=partition_max_gpus account=ml user=bob%20smith "
                     "partition=gpu gpus=3"]
    r = refusals.parse_line("[2026-12-03T09:06:16] lua: " + lines[0], UTC)
    assert r is not None and (r.user, r.gpus, r.rule) == ("bob smith", 3, "partition_max_gpus")


def test_lua_escapes_space_equals_and_newline():
    policy = _lua_policy()
    policy.submit({"user_name": "u=1 x\ny", "partition": "gpu", "tres_per_job": "gres:gpu:1"})
    (line,) = _logged(policy)
    assert "\n" not in line and line.endswith("rule=account_missing account= user=u%3D1%20x%0Ay partition=gpu gpus=1")
    r = refusals.parse_line("[2026-12-03T09:06:16] lua: " + line, UTC)
    assert r is not None and r.user == "u=1 x\ny" and r.account == ""


def test_lua_logs_nothing_on_accept():
    policy = _lua_policy()
    assert policy.submit({"user_name": "bob", "account": "ml", "partition": "gpu", "tres_per_job": "gres:gpu:1"}).accepted
    assert _logged(policy) == []


# ---- the recorded lab log, and logrotate --------------------------------------------------------------------

def test_recorded_log_counts():
    read = refusals.read_logs([DATA / "slurmctld.log"], UTC)
    assert len(read.refusals) == 7 and not read.bad_lines
    c = refusals.counts(read.refusals)
    assert c["by_rule"] == [{"rule": "account_missing", "refusals": 3}, {"rule": "partition_account", "refusals": 2},
                            {"rule": "partition_max_gpus", "refusals": 2}]
    total_lines = len((DATA / "slurmctld.log").read_text().splitlines())
    assert read.ignored_lines == total_lines - 7


def test_rotated_files_give_the_same_counts(tmp_path):
    lines = (DATA / "slurmctld.log").read_text().splitlines(keepends=True)
    third = len(lines) // 3
    with gzip.open(tmp_path / "slurmctld.log.2.gz", "wt") as fh:
        fh.writelines(lines[:third])
    # copytruncate overlap: the last line of .1 is repeated at the top of the live file
    (tmp_path / "slurmctld.log.1").write_text("".join(lines[third : 2 * third]))
    (tmp_path / "slurmctld.log").write_text("".join(lines[2 * third - 1 :]))
    (tmp_path / "other.log").write_text(REAL_LINE + "\n")
    files = refusals.rotated_files(str(tmp_path / "slurmctld.log"))
    assert [f.name for f in files] == ["slurmctld.log.2.gz", "slurmctld.log.1", "slurmctld.log"]
    read = refusals.read_logs(files, UTC)
    assert len(read.refusals) == 7


def test_fetch_days_stores_each_day(tmp_path):
    from datetime import date

    log = tmp_path / "log" / "slurmctld.log"
    log.parent.mkdir()
    shutil.copy(DATA / "slurmctld.log", log)
    summary = refusals.fetch_days(str(log), str(tmp_path / "state"), [date(2026, 12, 2), date(2026, 12, 3)], UTC)
    assert summary["refusals"] == 7
    stored = refusals.load_stored(str(tmp_path / "state"), [date(2026, 12, 3)])
    assert stored.refusals is not None and len(stored.refusals) == 7
    assert refusals.load_stored(str(tmp_path / "state"), [date(2026, 12, 2)]).refusals == []
    assert refusals.load_stored(str(tmp_path / "state"), [date(2026, 12, 5)]).refusals is None


def test_lua_logs_a_fail_closed_internal_error_as_a_rejection():
    policy = _lua_policy()
    res = policy.submit({"user_name": "bob", "account": "ml", "partition": "gpu", "tres_per_job": "gres:gpu:1"},
                        explode_on="tres_per_job")
    assert not res.accepted
    lines = _logged(policy)
    assert len(lines) == 1 and " rule=internal_error account=ml user=bob partition=gpu gpus=" in lines[0]


def test_lua_log_encoding_memo_is_exact_past_its_bound():
    """engine.lua remembers each value's encoding (bounded at 1,024 entries): repeats and values past the bound
    give the same lines as first sights, and Python reads every one back."""
    policy = _lua_policy()
    users = [f"user {i % 1500}=x" for i in range(3100)]  # 1,500 distinct: the memo is dropped and refilled
    for i, user in enumerate(users):
        policy.eval("gpuclust_sim_reset()")
        policy.submit({"user_name": user, "account": "ml", "partition": "gpu", "tres_per_job": f"gres:gpu:{3 + i % 4}"})
        (line,) = _logged(policy)
        r = refusals.parse_line("[2026-12-03T09:06:16] lua: " + line, UTC)
        assert r is not None and (r.user, r.gpus, r.account) == (user, 3 + i % 4, "ml"), line


@pytest.mark.parametrize("content", [b"\x00\x01\x02binary\xff\xfe", b"", b"JobID|State\n1|COMPLETED\n"],
                         ids=["binary", "empty", "a sacct dump"])
def test_nodes_file_without_nodes_is_refused(tmp_path: Path, content: bytes) -> None:
    """`--nodes FILE` that holds no node is an error naming the file and how to record one, not a silent 0."""
    from gpuclust.accounting.history.events import read_files
    from gpuclust.errors import InputError

    path = tmp_path / "nodes.txt"
    path.write_bytes(content)
    with pytest.raises(InputError, match=r"nodes\.txt.*no NodeName= record.*scontrol show node -o > FILE"):
        read_files(None, str(path))


# ---- Lua 5.3+ counts, and the warn lines of rules in warn mode (issue 47) --------------------------------------

@pytest.mark.parametrize(("text", "gpus"), [("16", 16), ("16.0", 16), ("1000000000.0", 1000000000), ("", None),
                                            ("16.5", None), ("1e%2B09", None), ("-1", None)])
def test_gpus_as_older_policies_logged_them_under_lua_5_4(text, gpus):
    """Before the engine wrote counts as integers under every Lua, Lua 5.3+ logged gpus=16.0: read as 16."""
    line = ("[2026-12-03T09:06:16.148] lua: gpuclust-policy-reject v1 op=submit rule=account_max_gpus "
            f"account=physics user=alice partition=gpu gpus={text}")
    r = refusals.parse_line(line, UTC)
    assert r is not None and r.gpus == gpus and r.rule == "account_max_gpus" and not r.warn


def test_warn_lines_are_would_be_refusals():
    line = REAL_LINE.replace("gpuclust-policy-reject", "gpuclust-policy-warn")
    r = refusals.parse_line(line, UTC)
    assert r is not None and r.warn and (r.rule, r.account, r.user, r.gpus) == ("partition_account", "physics", "root", 1)
    assert refusals.Refusal.from_dict(r.as_dict()) == r
    assert "warn" not in refusals.parse_line(REAL_LINE, UTC).as_dict()  # type: ignore[union-attr]  # stored as before
    with pytest.raises(ValueError, match="gpuclust-policy-warn v2"):
        refusals.parse_line(line.replace(" v1 ", " v2 "), UTC)


def test_lua_5_4_log_read_back_by_the_report():
    """A log written by the rendered policy under Lua 5.4 (job numbers are floats there): refusals and would-be
    refusals counted per rule, account and user, GPU counts exact."""
    pytest.importorskip("lupa")
    from gpuclust.accounting.figures.economics import _refusals_block, _tables
    from gpuclust.accounting.history.refusals import RefusalSource
    from gpuclust.policy.compile import compile_policy
    from gpuclust.policy.luasim import LuaPolicy
    from gpuclust.policy.render import render_lua

    cfg = parse_config(SITE + "[partition gpu]\nmax_gpus_per_job = 8\n[account ml]\nmax_gpus_per_job = 4\n"
                       "[account phys]\n[policy]\nrequire_account = yes\ndefault_partition = gpu\n"
                       "mode.account_max_gpus = warn\nenforce_from = 2026-09-01\n", "site.conf")
    lua = LuaPolicy(render_lua(compile_policy(cfg)), "5.4")
    jobs = [("alice", "ml", 2, 4), ("alice", "ml", 3, 2), ("bob", "ml", 1, 6), ("bob", "phys", 4, 4),
            ("carol", None, 1, 1), ("carol", "phys", 1, 2)]
    log = []
    for user, account, nodes, per_node in jobs:
        res = lua.submit({"user_name": user, "account": account, "partition": "gpu",
                          "tres_per_node": f"gres:gpu:{per_node}", "min_nodes": nodes, "max_nodes": nodes})
        log += [f"[2026-12-03T09:06:{10 + len(log):02d}] lua: {line}" for line in res.infos]
    read = [r for r in (refusals.parse_line(line, UTC) for line in log) if r is not None]
    assert [(r.rule, r.user, r.gpus, r.warn) for r in read] == [
        ("account_max_gpus", "alice", 8, True), ("account_max_gpus", "alice", 6, True),
        ("account_max_gpus", "bob", 6, True), ("partition_max_gpus", "bob", 16, False),
        ("account_missing", "carol", 1, False)]
    block = _refusals_block(RefusalSource(read))
    assert block["total"] == 2 and block["by_rule"] == [{"rule": "account_missing", "refusals": 1},
                                                        {"rule": "partition_max_gpus", "refusals": 1}]
    would = block["would_refuse"]
    assert would["total"] == 3
    assert would["by_rule"] == [{"rule": "account_max_gpus", "would_refuse": 3}]
    assert would["by_account"] == [{"account": "ml", "would_refuse": 3}]
    assert would["by_user"] == [{"user": "alice", "would_refuse": 2}, {"user": "bob", "would_refuse": 1}]
    tables = _tables([], [], [], block)
    assert list(tables["would_refuse_by_user"].columns) == ["user", "would_refuse"]
    # no warn lines: the report's tables are the ones it always had
    assert "would_refuse_by_user" not in _tables([], [], [], _refusals_block(RefusalSource(read[3:])))
