"""Issue 13: the accounting and crash holes of the sacct text path, the metrics, the site config and the CLI.

Regression tests per class (real sacct 22.05 output where Slurm can make the case: tests/data/accounting/
lab-holes-*.txt), then property tests (hypothesis) that draw sacct text and site configs from a grammar of
valid and broken inputs and assert: no traceback; every record counted (a row, a dropped step or a rejected
row named by file:line); CLI exit codes only 0, 1, 2 or 3. Case counts: tests/README.md.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuclust.accept import params
from gpuclust.accounting.ingest import text
from gpuclust.accounting.ingest.normalize import ReaderOptions
from gpuclust.accounting.ingest.schema import FETCH_DELIMITER, FETCH_FIELDS, RAW_FIELDS
from gpuclust.accounting.pipeline import read_input
from gpuclust.cli.main import cli
from gpuclust.config import check_config, load_config
from gpuclust.config.ini import parse_ini
from gpuclust.config.values import parse_duration
from gpuclust.errors import InputError

DATA = Path(__file__).resolve().parents[1] / "data" / "accounting"
SITE = DATA / "site.conf"
PLAIN_FIELDS = list(RAW_FIELDS)  # sacct -o order of the plain recordings: ... WCKey, Comment (free text last)
EXIT_CODES = {0, 1, 2, 3}


def _row(**kw: str) -> dict[str, str]:
    rec = {
        "JobID": "1", "JobIDRaw": "1", "JobName": "job", "User": "alice", "Account": "ml", "Partition": "gpu",
        "QOS": "normal", "State": "COMPLETED", "ExitCode": "0:0", "Submit": "2026-12-02T10:00:00",
        "Eligible": "2026-12-02T10:00:00", "Start": "2026-12-02T10:00:00", "End": "2026-12-02T11:00:00",
        "Elapsed": "01:00:00", "AllocTRES": "gres/gpu=1", "NNodes": "1", "NodeList": "n1", "WCKey": "",
        "Comment": "", "Reason": "None",
    }
    rec.update(kw)
    return rec


def _dump(rows: list[dict[str, str]], fields: list[str] = PLAIN_FIELDS, delim: str = "|") -> bytes:
    lines = [delim.join(fields)] + [delim.join(r.get(f, "") for f in fields) for r in rows]
    return ("\n".join(lines) + "\n").encode("utf-8")


def _report(tmp_path: Path, data: bytes, *extra: str, config: Path = SITE) -> tuple[Any, dict[str, Any] | None]:
    src = tmp_path / "in.txt"
    src.write_bytes(data)
    out = tmp_path / "out"
    result = CliRunner().invoke(cli, ["--config", str(config), "report", "build", "--input", str(src), "--out",
                                      str(out), "--format", "json", *extra])
    report = json.loads((out / "report.json").read_text()) if (out / "report.json").exists() else None
    return result, report


MIX_CONF = """[site]
cluster_name = t
state_dir = /nonexistent
[gpu_type h100]
price_per_gpu_hour = 2.50
[gpu_type a100]
price_per_gpu_hour = 1.60
[partition gpu]
gpu_type = h100
"""


# ---- GPUs and prices ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(("tres", "gpu_hours", "cost"), [
    ("gres/gpu:h100=4,mem=4G,node=1", 4.0, 10.0),  # typed keys alone (sacct 24.11): 4 GPUs, not 0
    ("gres/gpu:a100=1,gres/gpu:h100=3,gres/gpu=4", 4.0, 9.10),  # each type at its own rate (not 4 x h100)
    ("gres/gpu:a100=1,gres/gpu:h100=3", 4.0, 9.10),
    ("gres/gpu=4,gres/gpu:a100=1", 4.0, 1.60 + 3 * 2.50),  # 3 GPUs of no stated type: the partition's type
    ("gres/gpu:b200=2,gres/gpu:h100=2", 4.0, 5.0),  # b200 has no price: 2 GPU-hours unpriced
])
def test_gpu_count_and_price_per_type(tmp_path: Path, tres: str, gpu_hours: float, cost: float) -> None:
    conf = tmp_path / "site.conf"
    conf.write_text(MIX_CONF)
    result, report = _report(tmp_path, _dump([_row(AllocTRES=tres)]), config=conf)
    assert result.exit_code == 0, result.output
    assert report is not None
    assert report["totals"]["gpu_hours"] == pytest.approx(gpu_hours)
    assert report["totals"]["cost"] == pytest.approx(cost)
    unpriced = 2.0 if "b200" in tres else 0.0
    assert report["totals"]["unpriced_gpu_hours"] == pytest.approx(unpriced)


# ---- JobID reuse ---------------------------------------------------------------------------------------------


def test_reused_job_id_is_another_job(tmp_path: Path) -> None:
    """Slurm reuses ids after a database reset or a counter wrap: same id, other user or a much later Submit."""
    rows = [
        _row(JobID="5", JobIDRaw="5", User="alice", State="FAILED", ExitCode="1:0"),
        _row(JobID="5", JobIDRaw="5", User="bob", JobName="other", Submit="2026-12-02T11:00:00",
             Eligible="2026-12-02T11:00:00", Start="2026-12-02T11:00:00", End="2026-12-02T12:00:00"),
        _row(JobID="5", JobIDRaw="5", User="alice", JobName="later", Submit="2026-12-09T11:00:00",
             Eligible="2026-12-09T11:00:00", Start="2026-12-09T11:00:00", End="2026-12-09T12:00:00"),
    ]
    result, report = _report(tmp_path, _dump(rows))
    assert result.exit_code == 0, result.output
    assert report is not None
    assert (report["totals"]["runs"], report["totals"]["attempts"], report["totals"]["retries"]) == (3, 3, 0)


def test_requeue_stays_one_job() -> None:
    """Real sacct -D (lab-holes-pipe.txt): job 5 requeued, its second execution's Submit = the first's End."""
    from gpuclust.accounting.figures.metrics import build_report
    from gpuclust.accounting.history.store import latest_state
    from gpuclust.accounting.pipeline import input_period

    parsed = read_input(str(DATA / "lab-holes-pipe.txt"))
    report = build_report(latest_state(parsed.table), load_config(str(SITE)), input_period(parsed))
    # runs: 1, 2, 3, 5 (2 executions), 6 (het), 4_0, 4_1, 4_2; job 8 is still running
    assert (report.data["totals"]["runs"], report.data["totals"]["attempts"]) == (8, 9)
    assert report.data["input"]["left_out"]["running"] == 1


# ---- the text reader -------------------------------------------------------------------------------------------


def test_newline_in_last_column_real_sacct() -> None:
    """Comment last, with newlines (and a `|` after one) in it, and a name with a newline: the plain `|` dump
    reads as the multi-character-delimiter one (both recorded from the same jobs)."""
    plain = read_input(str(DATA / "lab-holes-pipe.txt"))
    fetch = read_input(str(DATA / "lab-holes-fetch.txt"), FETCH_DELIMITER)
    assert plain.rejected == fetch.rejected == 0
    cols = ["job_id", "job_name", "comment", "state", "submit"]
    assert plain.table.select(cols).cast(fetch.table.select(cols).schema).to_pylist() == \
        fetch.table.select(cols).to_pylist()
    comments = plain.table.column("comment").to_pylist()
    assert "team=ml\nproject=nl-last" in comments and "team=ml project=x\n" in comments and "arr\n|x" in comments


def test_running_jobs_counted_as_left_out(tmp_path: Path) -> None:
    rows = [_row(), _row(JobID="2", JobIDRaw="2", State="RUNNING", End="Unknown"),
            _row(JobID="3", JobIDRaw="3", State="PENDING", Start="Unknown", End="Unknown", AllocTRES="")]
    result, report = _report(tmp_path, _dump(rows))
    assert result.exit_code == 0
    assert report is not None
    left = report["input"]["left_out"]
    assert (left["rows"], left["running"], left["not_started"]) == (2, 1, 1)
    assert "End Unknown" in left["why"]
    assert "2 row(s) are no attempt" in result.output


def test_duplicate_header_column_rejected(tmp_path: Path) -> None:
    data = _dump([_row()], PLAIN_FIELDS + ["State"])
    result, _ = _report(tmp_path, data)
    assert result.exit_code == 2
    assert "in.txt:1" in result.output and "duplicate column 'State'" in result.output


@pytest.mark.parametrize("fast", [True, False])
def test_bom_accepted(fast: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    data = (DATA / "lab-pipe.txt").read_bytes()
    options = ReaderOptions(fast=fast)
    a = text.parse_parsable(b"\xef\xbb\xbf" + data, "|", "x", options=options)
    b = text.parse_parsable(data, "|", "x", options=options)
    assert a.rejected == b.rejected == 0 and a.table.equals(b.table)


@pytest.mark.parametrize("field", ["JobID", "JobIDRaw", "ExitCode", "Elapsed", "NNodes", "AllocTRES", "JobIDa",
                                   "JobIDh"])
@pytest.mark.parametrize("rows", [3, 12_000])
def test_int_above_int64_is_a_rejected_row(field: str, rows: int) -> None:
    big = "9" * 20
    value = {"JobID": big, "JobIDa": f"4_{big}", "JobIDh": f"4+{big}", "ExitCode": f"{big}:0",
             "Elapsed": f"{big}-01:00:00", "AllocTRES": f"gres/gpu:h100={big}"}.get(field, big)
    recs = [_row(JobID=str(i + 10), JobIDRaw=str(i + 10)) for i in range(rows)]
    recs[1] = _row(**{field.rstrip("ah"): value})
    for fast in (True, False):
        res = text.parse_parsable(_dump(recs), "|", "f.txt", options=ReaderOptions(fast=fast))
        assert (res.table.num_rows, res.rejected) == (rows - 1, 1)
        assert str(res.problems[0]).startswith("f.txt:3:")


# ---- CLI options -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("args", [["--target", "-5"], ["--target", "nan"], ["--target", "inf"],
                                  ["--delimiter", "\\x"], ["--delimiter", "\\"], ["--delimiter", ""]])
def test_bad_options_exit_2(tmp_path: Path, args: list[str]) -> None:
    result, _ = _report(tmp_path, (DATA / "lab-pipe.txt").read_bytes(), *args)
    assert result.exit_code == 2, result.output
    assert not isinstance(result.exception, Exception) or isinstance(result.exception, SystemExit)


def test_unwritable_out_exit_2(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    for out in (str(blocker / "sub"), "/proc/gpuclust-test"):
        result = CliRunner().invoke(cli, ["--config", str(SITE), "report", "build", "--input",
                                          str(DATA / "lab-pipe.txt"), "--out", out])
        assert result.exit_code == 2, result.output
        assert isinstance(result.exception, SystemExit)
        assert out in result.output


# ---- site config -----------------------------------------------------------------------------------------------


def test_huge_duration_rejected_by_config_check(tmp_path: Path) -> None:
    conf = tmp_path / "c.conf"
    conf.write_text(SITE.read_text().replace("retry_window = 24h", "retry_window = 99999999999999999999999d"))
    problems = check_config(str(conf))
    assert [p.line for p in problems] == [6] and "retry_window" in str(problems[0])
    assert parse_duration("36500d") == 36500 * 86400


def test_inline_comment_is_linear() -> None:
    started = time.process_time()
    doc = parse_ini("[site]\nx = a" + " " * 200_000 + "b\ny = c" + " \t" * 100_000 + "# note\n", "f")
    assert time.process_time() - started < 5  # (quadratic: minutes; linear: milliseconds)
    entries = doc.sections[0].entries
    assert entries["x"].value.endswith(" b") and entries["y"].value == "c"


def test_config_bom_and_bad_bytes(tmp_path: Path) -> None:
    conf = tmp_path / "c.conf"
    conf.write_bytes(b"\xef\xbb\xbf" + SITE.read_bytes())
    assert check_config(str(conf)) == []
    raw = SITE.read_bytes().replace(b"cluster_name = acct", b"cluster_name = ac\xfft")
    raw = raw.replace(b"retry_window = 24h", b"retry_window = forever")
    conf.write_bytes(raw)
    problems = check_config(str(conf))
    lines = sorted(p.line for p in problems if p.line is not None)
    assert 3 in lines  # the bad byte, by line (not a byte offset) ...
    assert 6 in lines  # ... and the rest of the file is still checked
    assert any("not UTF-8" in str(p) and "c.conf:3" in str(p) for p in problems)


@pytest.mark.parametrize("value", ["01234", "0", "00", "08", "09"])
def test_numeric_template_params_read_alike_in_bash(value: str) -> None:
    """bash arithmetic reads 01234 as octal (and 08 as an error): no numeric parameter may have a leading 0."""
    import re

    for regex in (params.PORT_RE, params.INT_RE, params.SIZE_RE, params.SECONDS_RE):
        if re.fullmatch(regex.strip("^$"), value):
            assert str(int(value)) == value  # only "0" itself


def test_templates_check_the_same_regexes() -> None:
    root = Path(__file__).resolve().parents[2] / "sbatch_templates"
    for path in root.glob("*.sbatch"):
        body = path.read_text()
        assert "[0-9]{4,5}" not in body and "'^[0-9]{1,6}$'" not in body and "'^[0-9]{1,12}" not in body


# ==== property tests ===========================================================================================

_WORD = st.text(alphabet="abcdefghxyzü", min_size=1, max_size=6)
# Free text: words joined by hazards (no word starts with a digit, so a continuation line never looks like
# the start of a record).
_FREE = st.lists(st.tuples(st.sampled_from([" ", "|", "\n", "=", ",", "-", "\t"]), _WORD), max_size=4).map(
    lambda parts: "".join(sep + word for sep, word in parts)).flatmap(
    lambda rest: _WORD.map(lambda first: first + rest))
_FREE_TAIL = st.tuples(_FREE, st.sampled_from(["", "", "\n"])).map("".join)  # (a value may end in a newline)
_BIG = "9" * 20
_TIME = st.one_of(st.just("2026-12-02T10:00:00"), st.just("2026-12-02T10:30:00"), st.just("Unknown"),
                  st.just("None"), st.just("2026-13-45T99:00:00"), st.just(""))


@st.composite
def _record(draw: st.DrawFn, i: int) -> tuple[dict[str, str], str]:
    """One sacct record and what it must become: 'row', 'step' or 'rejected'."""
    kind = draw(st.sampled_from(["plain", "array", "pending", "het", "step", "requeue", "big", "bad"]))
    base = str(100 + i)
    rec = _row(JobID=base, JobIDRaw=base, JobName=draw(_FREE), Comment=draw(_FREE_TAIL),
               User=draw(st.sampled_from(["alice", "bob"])))
    outcome = "row"
    if kind == "array":
        rec["JobID"] = f"{base}_{draw(st.integers(0, 99))}"
    elif kind == "pending":
        rec.update(JobID=f"{base}_[1-{draw(st.integers(2, 9))}]", State="PENDING", Start="Unknown", End="Unknown",
                   AllocTRES="")
    elif kind == "het":
        rec["JobID"] = f"{base}+{draw(st.integers(0, 2))}"
    elif kind == "step":
        rec["JobID"] = f"{base}.{draw(st.sampled_from(['batch', 'extern', '0']))}"
        outcome = "step"
    elif kind == "requeue":
        rec.update(JobID="7", JobIDRaw="7", State=draw(st.sampled_from(["REQUEUED", "COMPLETED"])))
    elif kind == "big":
        field = draw(st.sampled_from(["JobID", "JobIDRaw", "ExitCode", "Elapsed", "NNodes", "AllocTRES"]))
        rec[field] = {"ExitCode": f"{_BIG}:0", "Elapsed": f"{_BIG}:00", "AllocTRES": f"gres/gpu={_BIG}"}.get(
            field, _BIG)
        outcome = "rejected"
    elif kind == "bad":
        field, value = draw(st.sampled_from([("State", "done"), ("ExitCode", "x"), ("Submit", "yesterday"),
                                             ("Elapsed", "1h"), ("NNodes", "-1"), ("AllocTRES", "gres/gpu=x")]))
        rec[field] = value
        outcome = "rejected"
    for name in ("Submit", "Eligible", "Start", "End"):
        if outcome == "row" and kind != "pending" and draw(st.integers(0, 9)) == 0:
            value = draw(_TIME)
            rec[name] = value
            if value not in ("2026-12-02T10:00:00", "2026-12-02T10:30:00", "Unknown", "None", ""):
                outcome = "rejected"
    rec["AllocTRES"] = rec["AllocTRES"] if kind in ("pending", "big", "bad") else draw(st.sampled_from([
        "gres/gpu=1", "gres/gpu:h100=4,mem=4G,node=1", "gres/gpu:a100=1,gres/gpu:h100=3,gres/gpu=4",
        "billing=1,cpu=1,gres/gpu:h100=2,gres/gpu=2,mem=1000M,node=1", "cpu=1,mem=1G"]))
    return rec, outcome


@st.composite
def _dump_case(draw: st.DrawFn) -> tuple[bytes, str, list[str], bool]:
    """(file bytes, delimiter, outcome per record, header is valid)."""
    n = draw(st.integers(0, 12))
    recs = [draw(_record(i)) for i in range(n)]
    layout = draw(st.sampled_from(["fetch", "plain"]))
    fields = list(FETCH_FIELDS) if layout == "fetch" else PLAIN_FIELDS
    # A plain `|` dump can only be split where the pipes are in one free-text field or where the record is
    # unambiguous; the multi-character delimiter never occurs in values.
    delim = FETCH_DELIMITER if layout == "fetch" or draw(st.booleans()) else "|"
    if delim == "|":
        for rec, _ in recs:
            rec["JobName"] = rec["JobName"].replace("|", "/")
    header_ok = True
    if draw(st.integers(0, 9)) == 0:
        fields = fields + [draw(st.sampled_from(["State", "JobID", "Comment"]))]
        header_ok = False
    if recs and draw(st.integers(0, 4)) == 0:
        recs[draw(st.integers(0, n - 1))][0]["JobName"] += "\x07"
    data = _dump([r for r, _ in recs], fields, delim)
    if draw(st.booleans()):
        data = b"\xef\xbb\xbf" + data
    if b"\x07" in data:  # a byte that is no UTF-8, inside a name
        data = data.replace(b"\x07", b"\xff")
    return data, delim, [o for _, o in recs], header_ok


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=_dump_case(), fast=st.booleans())
def test_property_sacct_text_every_record_accounted(case: tuple[bytes, str, list[str], bool], fast: bool) -> None:
    data, delim, outcomes, header_ok = case
    try:
        res = text.parse_parsable(data, delim, "in.txt", options=ReaderOptions(fast=fast))
    except InputError as exc:
        assert not header_ok
        assert all(p.file == "in.txt" and p.line == 1 for p in exc.problems)
        return
    assert header_ok
    n_lines = data.count(b"\n") + 1
    assert res.table.num_rows + res.steps_dropped + res.rejected == len(outcomes)
    assert res.steps_dropped == outcomes.count("step")
    assert res.rejected == outcomes.count("rejected")
    assert all(p.file == "in.txt" and p.line is not None and 2 <= p.line <= n_lines for p in res.problems)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(case=_dump_case(), extra=st.sampled_from([[], ["--strict"], ["--target", "3"], ["--top", "1"]]))
def test_property_report_cli_exit_codes(tmp_path: Path, case: tuple[bytes, str, list[str], bool],
                                        extra: list[str]) -> None:
    data, delim, outcomes, header_ok = case
    result, report = _report(tmp_path, data, "--delimiter", delim.encode("unicode_escape").decode(), *extra)
    assert result.exit_code in EXIT_CODES, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    if result.exit_code == 0:
        assert report is not None
        info = report["input"]
        assert info["rows"] + info["steps_dropped"] + info["rejected_rows"] == len(outcomes)


# ---- site config -----------------------------------------------------------------------------------------------

_KEYS = {
    "site": ["cluster_name", "timezone", "state_dir", "retry_window", "report_labels",
             "target_completed_runs_per_month", "acceptance_stale_days", "nonsense"],
    "partition gpu": ["gpu_type", "price_per_gpu_hour", "gpus_per_node", "max_time", "busbw_min_size",
                      "max_gpus_per_job"],
    "gpu_type h100": ["price_per_gpu_hour"],
    "account ml": ["labels", "gpu_limit", "max_gpus_per_user"],
}
_VALUES = st.one_of(
    st.sampled_from(["acct", "UTC", "/var/lib/x", "24h", "7d", "2-00:00:00", "team, project", "100", "2.50", "h100",
                     "64M", "4", "team=ml", "0", "-1", "1e400", "nan", "99999999999999999999999d", "9" * 400,
                     "99999999999999999999999", "01234", "Mars/Olympus", "relative/path", ""]),
    st.text(alphabet="a1 #;=:[]\t.-", max_size=12),
)


@st.composite
def _config_case(draw: st.DrawFn) -> bytes:
    lines: list[bytes] = []
    sections = draw(st.lists(st.sampled_from(list(_KEYS) + ["bogus", "site"]), min_size=0, max_size=5))
    for section in sections:
        lines.append(f"[{section}]".encode())
        for key in draw(st.lists(st.sampled_from(_KEYS.get(section, ["x"])), max_size=5)):
            value = draw(_VALUES)
            comment = draw(st.sampled_from(["", "  # note", " ; note", "#glued"]))
            spaces = " " * draw(st.sampled_from([0, 1, 3000]))
            lines.append(f"{key} = {value}{spaces}{comment}".encode())
        if draw(st.integers(0, 5)) == 0:
            lines.append(draw(st.sampled_from([b"  continued", b"garbage line", b"[broken", b"x = caf\xe9",
                                               b"\xff\xfe", b"# comment \xff"])))
    data = b"\n".join(lines) + b"\n"
    if draw(st.booleans()):
        data = b"\xef\xbb\xbf" + data
    return data


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                   HealthCheck.function_scoped_fixture])
@given(data=_config_case())
def test_property_site_config(tmp_path: Path, data: bytes) -> None:
    conf = tmp_path / "site.conf"
    conf.write_bytes(data)
    n_lines = data.count(b"\n") + 1
    problems = check_config(str(conf))
    assert all(p.file == str(conf) and (p.line is None or 1 <= p.line <= n_lines) for p in problems)
    result = CliRunner().invoke(cli, ["config", "check", str(conf)])
    assert result.exit_code == (2 if problems else 0), result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    if not problems:
        config = load_config(str(conf))
        assert 0 <= config.retry_window_s <= 100 * 365 * 86400
        src = DATA / "lab-pipe.txt"
        out = tmp_path / "out"
        result = CliRunner().invoke(cli, ["--config", str(conf), "report", "build", "--input", str(src), "--out",
                                          str(out), "--format", "json"])
        assert result.exit_code in EXIT_CODES, result.output
        assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)


def test_typed_only_alloc_tres_real_sacct(tmp_path: Path) -> None:
    """Real sacct (AccountingStorageTRES=gres/gpu:h100 only): 3 typed GPUs x 2 s, priced at h100's 2.50."""
    result, report = _report(tmp_path, (DATA / "lab-typed-only.txt").read_bytes())
    assert result.exit_code == 0, result.output
    assert report is not None
    assert report["totals"]["gpu_hours"] == pytest.approx(6 / 3600, abs=1e-9)
    assert report["totals"]["cost"] == pytest.approx(6 / 3600 * 2.5, abs=1e-9)


@pytest.mark.parametrize("since,until", [("0001-01-01", "0001-01-02"), ("8999-01-01", "9999-12-31")])
def test_period_out_of_range_exit_2(tmp_path: Path, since: str, until: str) -> None:
    """(store mode subtracts the lookback from --since: year 1 overflowed datetime)"""
    conf = tmp_path / "site.conf"
    conf.write_text(MIX_CONF.replace("/nonexistent", str(tmp_path / "state")))
    result = CliRunner().invoke(cli, ["--config", str(conf), "report", "build", "--since", since, "--until", until,
                                      "--out", str(tmp_path / "out")])
    assert result.exit_code == 2 and isinstance(result.exception, SystemExit), result.output
    assert "outside 1970-9000" in result.output
