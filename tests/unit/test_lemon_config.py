"""Lemon nodes (issue 46): ETTR against the paper's formula, worked by hand, and the [lemon] config section (its
defaults are the rule's old constants; each key changes the figure it names; bad values are refused with the
key's file:line)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from click.testing import CliRunner

from gpuclust.accounting.figures import lemon
from gpuclust.cli.main import cli
from gpuclust.config import parse_config
from gpuclust.config.lemon import LemonConfig
from gpuclust.errors import ConfigError

BASE = "[site]\ncluster_name = t\n"


def _job(job_id: str, user: str, node: str, end_s: float, state: str = "FAILED", gpus: int = 1,
         elapsed_s: float = 600.0) -> lemon.JobRow:
    return lemon.JobRow(job_id, user, "gpu", (node,), state, state == "FAILED", gpus, elapsed_s, end_s)


# ---- ETTR: Kokolis et al., arXiv 2410.21680, E[ETTR] ~= 1 - (u0 + dt_cp / 2) / MTTF ----------------------------


def test_ettr_is_the_papers_expected_value_worked_by_hand() -> None:
    # MTTF 10 h = 36,000 s, restart u0 = 600 s, checkpoint every dt_cp = 3,600 s:
    # 1 - (600 + 3600 / 2) / 36000 = 1 - 2400 / 36000 = 0.933333...
    assert lemon.ettr(10.0, 600.0, 3600.0) == pytest.approx(0.9333333333333333)
    # The paper's measured MTTF of 1,024-GPU jobs, 7.9 h = 28,440 s, with u0 = 5 min and dt_cp = 30 min:
    # 1 - (300 + 1800 / 2) / 28440 = 1 - 1200 / 28440 = 0.957805907...
    assert lemon.ettr(7.9, 300.0, 1800.0) == pytest.approx(0.9578059071729958)
    # Past the approximation's range (u0 + dt_cp / 2 = 3,000 s > MTTF 1,800 s): 1 - 3000 / 1800 < 0, shown as 0
    assert lemon.ettr(0.5, 1200.0, 3600.0) == 0.0
    # No failure seen: MTTF unknown, so is ETTR
    assert lemon.ettr(None, 600.0, 3600.0) is None


def test_ettr_of_a_report_uses_the_lemon_sections_checkpoint_and_restore() -> None:
    # four 1-GPU jobs of 600 s on one node, one of them NODE_FAIL: 4 x 600 s = 2400 s of run, 1 failure, so
    # MTTF = 2400 s = 0.6667 h; with dt_cp = 30 min and u0 = 300 s: 1 - (300 + 1800 / 2) / 2400 = 0.5
    jobs = [_job(str(i), "ann", "x", 3600.0 * (i + 1), "NODE_FAIL" if i == 0 else "COMPLETED") for i in range(4)]
    settings = parse_config(BASE + "[lemon]\ncheckpoint_interval = 30m\ndefault_restore_seconds = 300\n").lemon
    doc = lemon.compute(jobs, settings=settings)
    fleet = doc["fleet"]
    assert fleet["mttf_hours"] == pytest.approx(2400 / 3600)
    assert fleet["ettr"] == pytest.approx(0.5)
    assert (fleet["restore_seconds"], fleet["checkpoint_interval_seconds"]) == (300.0, 1800.0)
    assert doc["by_job_size"][0]["ettr"] == pytest.approx(0.5)
    # the defaults: u0 = 600 s, dt_cp = 3600 s: 1 - (600 + 1800) / 2400 = 0 (clipped from exactly 0)
    assert lemon.compute(jobs)["fleet"]["ettr"] == pytest.approx(0.0)


# ---- [lemon] -------------------------------------------------------------------------------------------------


def test_defaults_are_the_old_constants() -> None:
    cfg = parse_config(BASE).lemon
    assert cfg == LemonConfig()
    assert (cfg.alpha, cfg.min_failures, cfg.min_shared_jobs, cfg.min_shared_users) == (0.01, 3, 2, 2)
    assert (cfg.failure_window_s, cfg.min_jobs, cfg.min_gpu_hours) == (3600, 0, 0.0)
    assert (cfg.checkpoint_interval_s, cfg.default_restore_s, cfg.audit_lookback_s) == (3600, 600.0, 7 * 86400)
    assert (lemon.ALPHA, lemon.MIN_FAILURES, lemon.MIN_SHARED_JOBS, lemon.MIN_SHARED_USERS) == (0.01, 3, 2, 2)
    assert (lemon.DEFAULT_RESTORE_S, lemon.DEFAULT_CHECKPOINT_INTERVAL_S, lemon.FAILURE_WINDOW_S) == (600.0, 3600.0,
                                                                                                    3600)


def test_the_example_configs_lemon_section_is_the_defaults(example_config_path: Path) -> None:
    text = example_config_path.read_text()
    assert "\n[lemon]\n" in text
    assert parse_config(text, str(example_config_path)).lemon == LemonConfig()


def test_keys_are_read() -> None:
    cfg = parse_config(BASE + "[lemon]\nalpha = 5%\nmin_failures = 2\nmin_shared_jobs = 3\nmin_shared_users = 1\n"
                       "failure_window = 10m\nmin_jobs = 5\nmin_gpu_hours = 1.5\ncheckpoint_interval = 00:30:00\n"
                       "default_restore_seconds = 90\naudit_lookback = 6h\n").lemon
    assert cfg == LemonConfig(alpha=0.05, min_failures=2, min_shared_jobs=3, min_shared_users=1, failure_window_s=600,
                              min_jobs=5, min_gpu_hours=1.5, checkpoint_interval_s=1800, default_restore_s=90.0,
                              audit_lookback_s=6 * 3600)


@pytest.mark.parametrize(("line", "message"), [
    ("alpha = 0", "strictly between 0 and 1"),
    ("alpha = 1", "strictly between 0 and 1"),
    ("alpha = 1.5", "between 0 and 1"),
    ("alpha = often", "expected a number"),
    ("min_failures = 0", "must be > 0"),
    ("min_shared_jobs = 1", "at least 2 (one job's non-zero exit is that job's own"),
    ("min_shared_users = 0", "must be > 0"),
    ("failure_window = 7m", "must divide a day evenly"),
    ("failure_window = 2d", "between 1s and 1d"),
    ("failure_window = 0", "between 1s and 1d"),
    ("min_jobs = -1", "must be >= 0"),
    ("min_gpu_hours = -2", "finite number >= 0"),
    ("checkpoint_interval = 0", "positive duration"),
    ("default_restore_seconds = soon", "expected a number"),
    ("audit_lookback = 0", "positive duration"),
    ("alpah = 0.05", "alpha"),  # an unknown key, with the close match
])
def test_bad_values_are_refused_with_the_line(line: str, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_config(BASE + "[lemon]\n" + line + "\n", "site.conf")
    text = str(err.value)
    assert message in text and "site.conf:4" in text, text


# ---- each key changes its figure -------------------------------------------------------------------------------


def test_failure_window_splits_an_hour() -> None:
    # two users' jobs all fail on y at minute 5 and again at minute 25 of one UTC hour
    hour = 5 * 3600.0
    jobs = [_job("a1", "ann", "y", hour + 300), _job("b1", "bob", "y", hour + 310),
            _job("a2", "ann", "y", hour + 1500), _job("b2", "bob", "y", hour + 1510)]
    assert lemon.compute(jobs)["nodes"][0]["shared_exit"] == 1  # one UTC hour
    ten_minutes = LemonConfig(failure_window_s=600)
    doc = lemon.compute(jobs, settings=ten_minutes)
    assert doc["nodes"][0]["shared_exit"] == 2 and doc["failure_window_seconds"] == 600
    # a window that splits each pair (ends at :05:00 and :05:10 fall in different 10 s windows): one job each,
    # never shared
    assert lemon.compute(jobs, settings=LemonConfig(failure_window_s=10))["nodes"][0]["shared_exit"] == 0


def test_shared_thresholds() -> None:
    jobs = [_job(f"e{i}", "eve", "x", 3600.0 * 2 + 60 * i) for i in range(3)]  # one user's failing array
    assert lemon.compute(jobs)["nodes"][0]["shared_exit"] == 0
    assert lemon.compute(jobs, settings=LemonConfig(min_shared_users=1))["nodes"][0]["shared_exit"] == 1
    assert lemon.compute(jobs, settings=LemonConfig(min_shared_users=1, min_shared_jobs=4))["nodes"][0][
        "shared_exit"] == 0


def _fleet() -> list[lemon.JobRow]:
    """Six nodes, 24 hours of one 4-GPU job an hour; "bad" fails every other hour, each peer once."""
    return [_job(f"{n}{h}", f"u{h % 3}", n, h * 3600.0 + 1800,
                 "NODE_FAIL" if (n == "bad" and h % 2) or (n != "bad" and h == 1) else "COMPLETED", 4)
            for n in ("bad", "a", "b", "c", "d", "e") for h in range(24)]


def test_alpha_min_failures_and_who_is_judged() -> None:
    default = lemon.compute(_fleet())
    assert default["suspects"] == ["bad"] and default["nodes_tested"] == 6
    bad = {r["node"]: r for r in default["nodes"]}["bad"]
    assert bad["failures"] == 12
    # alpha under the corrected p-value, or more failures than it has: not named
    assert lemon.compute(_fleet(), settings=LemonConfig(alpha=bad["p_adjusted"] / 2))["suspects"] == []
    assert lemon.compute(_fleet(), settings=LemonConfig(min_failures=13))["suspects"] == []
    # every node has 24 jobs and 24 x 4 x 600 s = 16 GPU-hours: a bar above that judges none
    for settings in (LemonConfig(min_jobs=25), LemonConfig(min_gpu_hours=16.5)):
        doc = lemon.compute(_fleet(), settings=settings)
        assert doc["nodes_tested"] == 0 and doc["suspects"] == []
        assert {r["p_adjusted"] for r in doc["nodes"]} == {1.0}
    at_the_bar = lemon.compute(_fleet(), settings=LemonConfig(min_jobs=24, min_gpu_hours=16))
    assert at_the_bar["nodes_tested"] == 6 and at_the_bar["suspects"] == ["bad"]


def test_report_build_reads_the_lemon_section(tmp_path: Path) -> None:
    header = "JobID|JobIDRaw|User|Account|Partition|QOS|State|ExitCode|Submit|Start|End|Elapsed|AllocTRES|NNodes|NodeList"
    rows = [header]
    for i, (minute, user) in enumerate([(5, "ann"), (5, "bob"), (25, "ann"), (25, "bob")]):
        rows.append(f"{i + 1}|{i + 1}|{user}|ml|gpu|normal|FAILED|1:0|2026-12-01T00:00:00|"
                    f"2026-12-01T00:{minute - 1:02d}:00|2026-12-01T00:{minute:02d}:00|00:01:00|"
                    "billing=1,cpu=1,gres/gpu=1,mem=1000M,node=1|1|n1")
    dump = tmp_path / "dump.txt"
    dump.write_text("\n".join(rows) + "\n")
    out = {}
    for name, section in (("default", ""), ("tuned", "[lemon]\nfailure_window = 10m\nmin_failures = 2\n")):
        conf = tmp_path / f"{name}.conf"
        conf.write_text(f"{BASE}state_dir = {tmp_path / name}\n{section}")
        result = CliRunner().invoke(cli, ["--config", str(conf), "report", "build", "--input", str(dump),
                                          "--since", "2026-12-01", "--until", "2026-12-02", "--out",
                                          str(tmp_path / f"out-{name}"), "--format", "json,html"])
        assert result.exit_code == 0, result.output
        out[name] = json.loads((tmp_path / f"out-{name}" / "report.json").read_text())["lemon_nodes"]
    assert out["default"]["nodes"][0]["shared_exit"] == 1 and out["default"]["failure_window_seconds"] == 3600
    assert "failure hours;" in (tmp_path / "out-default" / "report.html").read_text()
    tuned = out["tuned"]
    assert tuned["nodes"][0]["shared_exit"] == 2 and tuned["failure_window_seconds"] == 600
    assert tuned["min_failures"] == 2
    assert "failure 600 s windows;" in (tmp_path / "out-tuned" / "report.html").read_text()
    assert math.isclose(tuned["nodes"][0]["gpu_hours"], 4 / 60, abs_tol=1e-6)  # (rounded to 6 places)


def test_audit_lookback_is_the_lemon_checks_window(tmp_path: Path) -> None:
    from datetime import datetime, timedelta, timezone

    from gpuclust.audit.lemon import check_lemons
    from gpuclust.exitcodes import Nagios

    now = datetime(2026, 12, 2, tzinfo=timezone.utc)
    asked: list[tuple[datetime, datetime]] = []

    def source(site: object, since: datetime, until: datetime) -> dict:
        asked.append((since, until))
        return lemon.compute([])

    for section, days, since, words in (("", None, now - timedelta(days=7), "7 day(s)"),
                                        ("[lemon]\naudit_lookback = 6h\n", None, now - timedelta(hours=6), "6 hour(s)"),
                                        ("[lemon]\naudit_lookback = 90s\n", None, now - timedelta(seconds=90), "90 s"),
                                        ("[lemon]\naudit_lookback = 6h\n", 2, now - timedelta(days=2), "2 day(s)")):
        site = parse_config(f"{BASE}state_dir = {tmp_path}\n{section}")
        (found,) = check_lemons(site, ["a"], now, days, source=source)
        assert asked[-1] == (since, now)
        assert found.severity == Nagios.OK and f"no lemon node over the last {words} " in found.message, found
