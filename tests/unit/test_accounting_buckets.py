"""Issue 28: every row read lands in exactly one bucket, a job that ran is never "pending", and what a dump
cannot give is unknown (counted and named), never 0.

Built from real recorded dumps: the lab recordings of tests/data/accounting (README.md there) and a public
project's sacct dump, tests/data/accounting/public/slurm2sql-test-data1.txt (SOURCES.md there): a job that ran
3.5 hours with an empty AllocTRES, and a CANCELLED job with a Start, End `Unknown` and an empty AllocTRES.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuclust.accounting import pipeline
from gpuclust.accounting.figures.metrics.attempts import allocated_mask, ran_mask, row_buckets
from gpuclust.accounting.ingest.normalize import ReaderOptions
from gpuclust.accounting.ingest.period import Period
from gpuclust.accounting.ingest.schema import FETCH_DELIMITER
from gpuclust.accounting.pipeline import read_input
from gpuclust.cli.main import cli
from gpuclust.config import load_config
from gpuclust.errors import InputError

DATA = Path(__file__).resolve().parents[1] / "data" / "accounting"
SITE = DATA / "site.conf"
PUBLIC = DATA / "public" / "slurm2sql-test-data1.txt"
NOT_DUMPS = {"reasons.txt", "expected.json", "lab-scenario.json",  # (the scenario's job ids, --reasons input)
             # slurmrestd's live queue (/slurm/), refused by name (tests/unit/test_sacct_json_slurmweb.py)
             "slurmweb-v0.0.39-slurmctld-job-completed.json", "slurmweb-v0.0.42-slurmctld-job-gpus-completed.json"}
# Fragments of public documents that show usage TRES only (usage/SOURCES.md): no job id, state or times, so
# refused whole at line 1 (nothing read, nothing lost).
REFUSED = {"aalto-triton-tresusageinave-p-fragment.txt", "curc-alpine-18194943-tresusageinave-pno-noconvert.txt",
           "curc-alpine-18194943-tresusageinmax-pno.txt", "schedmd-gres-doc-1277.0-tresusageinave-p.txt",
           "schedmd-gres-doc-1277.0-tresusageintot-p.txt"}
CORPORA = sorted(p for p in DATA.rglob("*") if p.suffix in (".txt", ".json") and p.name not in NOT_DUMPS)
_RECORD_START = re.compile(rb"^[0-9]+(?:_[0-9]+|_\[[^\]\n]*\]|\+[0-9]+)?(?:\.[^|\x1f\n]+)?(?:\||\x1f)", re.M)


def _wide() -> Period:
    from datetime import datetime, timezone

    return Period(datetime(2000, 1, 1, tzinfo=timezone.utc), datetime(2100, 1, 1, tzinfo=timezone.utc))


def _records_in(path: Path) -> int:
    """The records of a dump, counted without gpuclust's readers: JSON jobs and their steps; text lines that
    start with a JobID and a delimiter (a continuation line of a name or comment never does in these files)."""
    data = path.read_bytes()
    if path.suffix == ".json":
        jobs = json.loads(data)["jobs"]
        return len(jobs) + sum(len(job.get("steps") or []) for job in jobs)
    return len(_RECORD_START.findall(data.split(b"\n", 1)[1] if b"\n" in data else b""))


def _build(path: Path, **kw: Any) -> dict[str, Any]:
    report, _ = pipeline.build(load_config(str(SITE)), kw.pop("period", _wide()), input_path=str(path), **kw)
    return report.data


# ---- the bucket identity over every recorded corpus ------------------------------------------------------------


@pytest.mark.parametrize("path", CORPORA, ids=[str(p.relative_to(DATA)) for p in CORPORA])
def test_every_row_read_lands_in_one_bucket(path: Path) -> None:
    """rows read = sum of the buckets (rejected, steps, superseded, filtered, attempt rows, running, not started,
    never ran), on every sacct dump recorded in tests/data/accounting."""
    if path.name in REFUSED:
        with pytest.raises(InputError) as exc:
            read_input(str(path))
        assert all(p.line == 1 for p in exc.value.problems)
        return
    parsed = read_input(str(path))
    buckets = row_buckets(allocated_mask(parsed.table) | ran_mask(parsed.table),
                          ~np.isnan(_epochs(parsed.table, "start")), ~np.isnan(_epochs(parsed.table, "end")))
    per_row = np.sum([mask.astype(int) for mask in buckets.values()], axis=0)
    assert (per_row == 1).all()  # one bucket per row, no more, no less
    accounted = _build(path)["input"]["rows_accounted"]
    assert accounted["balanced"], accounted
    assert accounted["read"] == _records_in(path), accounted
    assert accounted["read"] == sum(v for k, v in accounted.items() if k not in ("read", "balanced"))


def _epochs(table: Any, name: str) -> np.ndarray:
    col = table.column(name).cast("int64").to_numpy(zero_copy_only=False)
    return np.where(table.column(name).is_null().to_numpy(zero_copy_only=False), np.nan, col.astype(float))


# ---- items 1 and 2: a real public dump ------------------------------------------------------------------------


def test_job_that_ran_without_alloctres_is_an_attempt_with_unknown_gpu_hours() -> None:
    """slurm2sql's job 43974388 ran 03:33:25 on pe2 with an empty AllocTRES: an attempt (never "cancelled while
    pending"), its GPU-hours unknown and counted; 43977780 (CANCELLED, Start, End Unknown, no AllocTRES, on pe2)
    is still running as far as the dump knows: no row is lost."""
    data = _build(PUBLIC)
    info = data["input"]
    assert info["left_out"]["no_allocation"] == 0
    assert info["left_out"]["running"] == 1
    assert data["totals"]["attempts"] == 1 and data["totals"]["runs"] == 1
    unknown = [e for e in info["unknown"] if e["missing"] == "AllocTRES" and e["count"] is not None]
    assert unknown and unknown[0]["count"] == 1
    (failure,) = data["top_failures"]
    assert failure["job_id"] == "43974388" and failure["gpu_hours"] is None and failure["cost"] is None
    assert info["rows_accounted"] == {"read": 5, "rejected": 0, "steps_dropped": 3, "superseded": 0,
                                      "filtered_out": 0, "attempt_rows": 1, "running": 1, "not_started": 0,
                                      "no_allocation": 0, "balanced": True}


def test_cancelled_while_pending_stays_no_allocation() -> None:
    """The lab's jobs 2 and 3 (cancelled while pending: NodeList `None assigned`, Elapsed 0) still never ran."""
    for name in ("lab-cancelled-pending.txt", "lab-cancelled-pending.json"):
        info = _build(DATA / name)["input"]
        assert info["left_out"]["no_allocation"] == 2, name
        assert info["left_out"]["attempt_rows"] == 1, name
        assert "unknown" not in info, name


# ---- property: generated rows ------------------------------------------------------------------------------------

_FIELDS = ["JobID", "JobIDRaw", "JobName", "User", "Account", "Partition", "QOS", "State", "ExitCode", "Submit",
           "Eligible", "Start", "End", "Elapsed", "AllocTRES", "NNodes", "NodeList", "WCKey", "Comment"]


@st.composite
def _rows(draw: st.DrawFn) -> list[dict[str, str]]:
    rows = []
    for i in range(draw(st.integers(0, 14))):
        job = str(100 + draw(st.integers(0, 6)))  # (repeats: requeues, reused ids, superseded rows)
        start = draw(st.sampled_from(["2026-12-02T10:00:00", "2026-12-02T10:30:00", "Unknown", "None", ""]))
        end = draw(st.sampled_from(["2026-12-02T11:00:00", "Unknown", "None", "", "2026-12-02T10:00:00"]))
        rows.append({
            "JobID": job + draw(st.sampled_from(["", "", "_1", "+0", "+1", ".batch", "_[1-3]"])), "JobIDRaw": job,
            "JobName": f"j{i % 3}", "User": "u", "Account": draw(st.sampled_from(["ml", "physics"])),
            "Partition": "gpu", "QOS": "normal",
            "State": draw(st.sampled_from(["COMPLETED", "CANCELLED by 0", "RUNNING", "PENDING", "FAILED",
                                           "REQUEUED", "TIMEOUT", "done"])),
            "ExitCode": draw(st.sampled_from(["0:0", "1:0", "0:15"])), "Submit": "2026-12-02T09:00:00",
            "Eligible": "2026-12-02T09:00:00", "Start": start, "End": end,
            "Elapsed": draw(st.sampled_from(["00:00:00", "00:30:00", "1-00:00:00"])),
            "AllocTRES": draw(st.sampled_from(["", "", "billing=1,cpu=1,gres/gpu=2,mem=1000M,node=1", "cpu=1"])),
            "NNodes": "1", "NodeList": draw(st.sampled_from(["None assigned", "", "node1"])),
            "WCKey": "", "Comment": "",
        })
    return rows


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                   HealthCheck.function_scoped_fixture])
@given(rows=_rows(), fast=st.booleans(), narrow=st.booleans(), blank=st.sampled_from(["", "\n", "\r\n"]))
def test_property_rows_read_equal_the_buckets(tmp_path: Path, rows: list[dict[str, str]], fast: bool,
                                              narrow: bool, blank: str) -> None:
    fields = [f for f in _FIELDS if f not in ("AllocTRES", "NodeList", "Elapsed", "JobIDRaw")] if narrow else _FIELDS
    newline = "\r\n" if blank == "\r\n" else "\n"
    text = newline.join(["|".join(fields)] + ["|".join(r[f] for f in fields) for r in rows]) + newline + blank
    src = tmp_path / "dump.txt"
    src.write_text(text, encoding="utf-8", newline="")
    rejected = sum(r["State"] == "done" and "." not in r["JobID"] for r in rows)
    if rejected and not any(r["State"] != "done" and "." not in r["JobID"] for r in rows):
        # every job row rejected: an input error naming them, never an empty report (issue 45 item 8)
        with pytest.raises(InputError, match=rf"all {rejected} row\(s\) were rejected"):
            read_input(str(src), options=ReaderOptions(fast=fast))
        with pytest.raises(InputError, match=rf"all {rejected} row\(s\) were rejected"):
            pipeline.build(load_config(str(SITE)), _wide(), input_path=str(src))
        return
    parsed = read_input(str(src), options=ReaderOptions(fast=fast))
    report, _ = pipeline.build(load_config(str(SITE)), _wide(), input_path=str(src))
    accounted = report.data["input"]["rows_accounted"]
    assert accounted["balanced"], accounted
    assert accounted["read"] == len(rows)  # a trailing blank line (LF or CRLF) is no row
    assert parsed.table.num_rows + parsed.rejected + parsed.steps_dropped == len(rows)
    # (a step row is dropped as a step whatever its other fields say)
    assert parsed.rejected == rejected


# ---- items 3, 4, 5: the first bytes ----------------------------------------------------------------------------


@pytest.mark.parametrize("fast", [True, False])
def test_windows_line_ends_and_trailing_blank_line(fast: bool) -> None:
    """A real fetch-layout dump (newlines inside a name and comments) saved with CRLF line ends and a trailing
    blank line reads as the original: the blank line is no row, no value keeps a \\r."""
    data = (DATA / "lab-holes-fetch.txt").read_bytes()
    crlf = data.replace(b"\n", b"\r\n") + b"\r\n"
    from gpuclust.accounting.ingest import text

    want = text.parse_parsable(data, FETCH_DELIMITER, "a", options=ReaderOptions(fast=fast))
    got = text.parse_parsable(crlf, FETCH_DELIMITER, "b", options=ReaderOptions(fast=fast))
    assert got.rejected == 0 and got.problems == []
    assert got.table.drop_columns(["line"]).to_pylist() == want.table.drop_columns(["line"]).to_pylist()


def test_dump_without_header_is_named_and_the_fix_shown() -> None:
    body = (DATA / "lab-pipe.txt").read_bytes().split(b"\n", 1)[1]  # as `sacct ... --noheader` writes it
    from gpuclust.accounting.ingest import text

    with pytest.raises(InputError) as exc:
        text.parse_parsable(body, None, "dump.txt")
    message = str(exc.value)
    assert "dump.txt:1" in message and "not a header" in message and "duplicate" not in message
    assert "--noheader" in message and "sacct -a -X --parsable2 --format=JobID," in message


def test_fetch_delimiter_detected() -> None:
    """`report fetch`'s own delimiter needs no --delimiter; `|` is the default otherwise."""
    path = DATA / "lab-parsable.txt"
    sniffed, given_ = read_input(str(path)), read_input(str(path), FETCH_DELIMITER)
    assert sniffed.rejected == 0
    assert sniffed.table.to_pylist() == given_.table.to_pylist()
    assert read_input(str(DATA / "lab-pipe.txt")).table.num_rows == 15


def test_header_in_another_delimiter_names_it(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"does not split on the delimiter '\|' but does on"):
        read_input(str(DATA / "lab-parsable.txt"), "|")


# ---- items 8, 9: a newcomer's narrow dump, without a site config ------------------------------------------------

NARROW = ["Account", "UID", "User", "JobID", "JobName", "State", "Start", "End"]  # (less ReqTRES: not recorded)


def _narrow_dump(tmp_path: Path) -> Path:
    """lab-parsable.txt cut down to a format sites document (`sacct -X -p -o Account,UID,User,JobID,JobName,
    State,Start,End,ReqTRES`), in the fetch delimiter (job 10's name holds a `|`). UID: every lab job ran as
    root (0)."""
    data = (DATA / "lab-parsable.txt").read_text(encoding="utf-8")
    header, body = data.split("\n", 1)
    names = header.split(FETCH_DELIMITER)
    records = re.split(r"\n(?=[0-9][0-9_+]*\x1f\|\x1e)", body.rstrip("\n"))
    lines = [FETCH_DELIMITER.join(NARROW)]
    for record in records:
        values = dict(zip(names, record.split(FETCH_DELIMITER), strict=True))
        values["UID"] = "0"
        lines.append(FETCH_DELIMITER.join(values[n] for n in NARROW))
    out = tmp_path / "narrow.txt"
    out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return out


def test_narrow_dump_is_read_and_its_unknowns_named(tmp_path: Path) -> None:
    full = _build(DATA / "lab-parsable.txt")
    data = _build(_narrow_dump(tmp_path))
    info = data["input"]
    assert info["rejected_rows"] == 0 and info["rows_accounted"]["balanced"]
    assert data["totals"]["attempts"] == full["totals"]["attempts"] == 14
    missing = {e["missing"] for e in info["unknown"]}
    assert {"AllocTRES", "ExitCode", "Submit", "Partition", "NodeList"} <= missing
    assert set(info["derived"]) == {"JobIDRaw", "Elapsed"}
    assert info["exit_codes_known"] is False
    gpu = [e for e in info["unknown"] if e["missing"] == "AllocTRES" and e["count"] is not None]
    assert gpu and gpu[0]["count"] == 14  # every attempt's GPU-hours unknown, counted


def test_input_needs_no_site_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GPUCLUST_CONFIG", raising=False)
    monkeypatch.setattr("gpuclust.config.site.DEFAULT_CONFIG_PATH", str(tmp_path / "none" / "site.conf"))
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(cli, ["report", "build", "--input", str(DATA / "lab-parsable.txt"),
                                      "--format", "json"])
    assert result.exit_code == 0, result.output
    report = json.loads((tmp_path / pipeline.NO_CONFIG_REPORT_DIR / "report.json").read_text())
    assert report["totals"]["attempts"] == 14 and report["totals"]["cost"] is None
    assert "no site config" in result.output


# ---- items 6, 7: one window, shown, for every figure and cross-check --------------------------------------------

ECON = DATA.parent / "economics"  # the lab's 09:00-10:00 recording (tests/data/economics/README.md)


def test_inferred_window_is_shown_and_the_sreport_check_does_not_claim_it() -> None:
    """Without --since/--until the window comes from the rows, once; it is named in report.json, and an
    sreport file (whose -n output names no window) is no longer said to cover the same window."""
    report, _ = pipeline.build(load_config(str(ECON / "site.conf")), None, input_path=str(ECON / "sacct-0900-1000.txt"),
                               events_path=str(ECON / "events-0900-1000.txt"), nodes_path=str(ECON / "nodes.txt"),
                               sreport_path=str(ECON / "sreport-0900-1000.txt"))
    data = report.data
    window = data["input"]["window"]
    assert window["source"] == "inferred"
    assert (window["start"], window["end"]) == (data["period"]["start"], data["period"]["end"])
    assert any("was inferred from the dump's rows" in n for n in data["input"]["notes"])
    cross = data["economics"]["sreport_cross_check"]
    assert cross["same_window"] is None and "sreport -P -n cluster utilization" in cross["note"]


def test_empty_period_is_an_empty_report_exit_0(tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["--config", str(SITE), "report", "build", "--input", str(DATA / "lab-pipe.txt"),
                                      "--since", "2026-11-01", "--until", "2026-11-02", "--out",
                                      str(tmp_path / "out"), "--format", "json"])
    assert result.exit_code == 0, result.output
    assert "no job attempts in the period 2026-11-01T00:00:00+00:00" in result.output
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert report["totals"]["runs"] == 0 and report["input"]["window"]["source"] == "given"


def test_no_dated_row_and_no_window_is_refused_not_made_up(tmp_path: Path) -> None:
    """A dump with a header and no rows: no window can be inferred (it used to become the last 24 hours)."""
    src = tmp_path / "empty.txt"
    src.write_bytes((DATA / "lab-pipe.txt").read_bytes().split(b"\n", 1)[0] + b"\n")
    with pytest.raises(InputError, match="give --since and --until"):
        pipeline.build(load_config(str(SITE)), None, input_path=str(src))
