"""sacct's pending Reason is one field of the registry (issue 16): fetched with the jobs (no second sacct call),
read by both text readers and the JSON reader alike, stored, and read by the economics' wait split. Recordings:
tests/data/accounting/reason/README.md (real 22.05 and 24.11)."""

from __future__ import annotations

from datetime import date, datetime, timezone
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from gpuclust.accounting.figures import economics
from gpuclust.accounting.history import store
from gpuclust.accounting.history.events import parse_reasons
from gpuclust.accounting.history.fetch import sacct_args
from gpuclust.accounting.ingest.jsonin import parse_input
from gpuclust.accounting.ingest.normalize import ReaderOptions
from gpuclust.accounting.ingest.period import Period
from gpuclust.accounting.ingest.registry import REGISTRY
from gpuclust.accounting.ingest.schema import FETCH_DELIMITER, FETCH_FIELDS, RAW_FIELDS, SCHEMA
from gpuclust.accounting.ingest.text import parse_parsable

ROOT = Path(__file__).resolve().parent.parent / "data" / "accounting"
DATA = ROOT / "reason"
VERSIONS = ("22.05", "24.11")
DAY = date(2026, 12, 3)
PERIOD = Period(datetime(2026, 12, 3, tzinfo=timezone.utc), datetime(2026, 12, 4, tzinfo=timezone.utc))
FORMS = {"parsable": ("lab-parsable.txt", FETCH_DELIMITER), "pipe": ("lab-pipe.txt", "|"), "json": ("lab-json.json", "|")}


def _parse(version: str, form: str, fast: bool = True):
    name, delim = FORMS[form]
    parsed = parse_input((DATA / version / name).read_bytes(), delim, name, options=ReaderOptions(fast=fast))
    assert parsed.problems == [] and parsed.rejected == 0, parsed.problems[:3]
    return parsed


def _reasons(parsed) -> dict[tuple[str, object], str]:
    t = parsed.table
    return dict(zip(zip(t.column("job_id").to_pylist(), t.column("start").to_pylist(), strict=True),
                    t.column("reason").to_pylist(), strict=True))


def test_fetch_asks_for_reason_once():
    args = sacct_args(DAY)
    assert args[args.index("-o") + 1].split(",") == list(FETCH_FIELDS)
    # a fixed-format field last (Timelimit, issue 43; NNodes before it), so a free-text value cannot end a record
    assert "Reason" in FETCH_FIELDS and FETCH_FIELDS[0] == "JobID" and FETCH_FIELDS[-2:] == ("NNodes", "Timelimit")
    header = (DATA / "22.05" / "lab-parsable.txt").read_bytes().split(b"\n", 1)[0]
    # recorded with this very list, before the step usage fields (issue 26), Timelimit (issue 43), SubmitLine and
    # ReqTRES (issue 47) joined it: in the same order, and what it lacks is optional (a dump of an older
    # gpuclust's fetch still reads)
    recorded = header.decode().split(FETCH_DELIMITER)
    assert [f for f in FETCH_FIELDS if f in recorded] == recorded
    lacking = {f for f in FETCH_FIELDS if f not in recorded}
    assert {"Timelimit", "SubmitLine", "ReqTRES"} <= lacking <= set(REGISTRY.optional), \
        f"a field the 22.05 recording lacks is required: {sorted(lacking - set(REGISTRY.optional))}"


@pytest.mark.parametrize("fast", [True, False])
@pytest.mark.parametrize("version", VERSIONS)
def test_text_pipe_and_json_give_the_same_reasons(version, fast):
    roles = {"2": "AssocGrpGRES", "9": "JobHeldUser"}
    got = {form: _reasons(_parse(version, form, fast)) for form in FORMS}
    assert got["pipe"] == got["parsable"] == got["json"]
    reasons = got["parsable"]
    for job, reason in roles.items():
        assert {r for (j, _), r in reasons.items() if j == job} == {reason}
    assert sorted(r for (j, _), r in reasons.items() if j == "5") == ["BeginTime", "None"]  # requeued: 2 rows
    assert set(reasons.values()) == {"None", "AssocGrpGRES", "JobHeldUser", "BeginTime"}


@pytest.mark.parametrize("fast", [True, False])
def test_dump_without_reason_reads_null_not_empty(fast):
    """A dump recorded before Reason was fetched (tests/data/accounting/lab-*.txt): reason unknown (null)."""
    for name, delim in (("lab-parsable.txt", FETCH_DELIMITER), ("lab-pipe.txt", "|")):
        parsed = parse_parsable((ROOT / name).read_bytes(), delim, name, options=ReaderOptions(fast=fast))
        if delim == FETCH_DELIMITER or not fast:  # (a plain dump with Comment last and a newline in a name:
            assert parsed.reader == ("direct" if fast else "reference")  # the reference reads it either way)
        assert parsed.table.num_rows == 15 and parsed.table.column("reason").null_count == 15


@pytest.mark.parametrize("fast", [True, False])
@pytest.mark.parametrize("delimiter", ["|", FETCH_DELIMITER, "|#|"])
def test_delimiter_inside_reason_is_placed(fast, delimiter):
    """Hand-made (sacct prints enum names, never seen with a `|`): a `|` in Reason, JobName and Comment of a
    plain dump in the registry's order goes back where it belongs, as in the other free-text fields."""
    base = {"JobID": "1", "JobIDRaw": "1", "JobName": "a|b", "User": "u", "Account": "ml", "Partition": "gpu",
            "QOS": "normal", "State": "COMPLETED", "ExitCode": "0:0", "Reason": "odd|reason",
            "Submit": "2026-12-03T10:00:00", "Eligible": "2026-12-03T10:00:00", "Start": "2026-12-03T10:00:01",
            "End": "2026-12-03T10:00:05", "Elapsed": "00:00:04", "AllocTRES": "gres/gpu=1", "NNodes": "1",
            "NodeList": "n1", "WCKey": "", "Comment": "x|y"}
    rows = [dict(base, JobID=str(i), JobIDRaw=str(i)) for i in range(1, 30)]
    rows[3]["Reason"] = "None"
    for fields in (RAW_FIELDS, FETCH_FIELDS):
        data = "\n".join([delimiter.join(fields), *(delimiter.join(r.get(f, "") for f in fields) for r in rows)]) + "\n"
        parsed = parse_parsable(data.encode(), delimiter, "x", options=ReaderOptions(fast=fast))
        if delimiter == "|" and fields == FETCH_FIELDS:
            continue  # JobName and Comment are neighbours there: a `|` in both is ambiguous (reported)
        assert parsed.problems == []
        t = parsed.table
        assert t.column("reason").to_pylist() == [r["Reason"] for r in rows]
        assert t.column("job_name").to_pylist() == ["a|b"] * len(rows)
        assert t.column("comment").to_pylist() == ["x|y"] * len(rows)


def test_old_store_day_reads_reason_null(tmp_path):
    parsed = _parse("22.05", "parsable")
    root = store.store_dir(str(tmp_path))
    with store.staged(root, [DAY]) as stage:
        stage.write_day(DAY, parsed.table)
    (day_file,) = [p for p in root.rglob("*.parquet")]
    old = pq.read_table(day_file)
    pq.write_table(old.drop(["reason"]), day_file)  # a day stored before the column existed
    loaded = store.load(root, [DAY])
    assert loaded.num_rows == 15 and loaded.column("reason").null_count == 15
    waits, note = economics._pending_waits(loaded, PERIOD, None)
    assert waits == [] and "unknown" in note
    loaded_new = pq.read_table(day_file.parent / day_file.name)  # (still readable as written)
    assert "reason" not in loaded_new.column_names


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("form", sorted(FORMS))
def test_wait_split_from_the_column_equals_the_second_sacct_call(version, form):
    """The wait split read from the table's Reason column is what the old second call (reasons.txt, recorded on
    the same lab) gave; the file still wins where given (`report build --reasons`)."""
    table = _parse(version, form).table
    reasons = parse_reasons((DATA / version / "reasons.txt").read_text())
    from_column, note = economics._pending_waits(table, PERIOD, None)
    from_file, _ = economics._pending_waits(table.drop(["reason"]), PERIOD, reasons)
    assert from_column == from_file and "one Reason" in note
    by = {w["pending_reason"]: w for w in from_column}
    # held: 9 (JobHeldUser) and the requeued 5 (BeginTime)
    assert by["quota"]["jobs"] == 1 and by["held"]["jobs"] == 2 and by["none (not kept)"]["jobs"] >= 10
    override = {k: "Priority" for k in reasons}
    forced, _ = economics._pending_waits(table, PERIOD, override)
    assert {w["pending_reason"]: w["jobs"] for w in forced}["priority"] == sum(w["jobs"] for w in from_column)


def test_schema_places_reason_after_state():
    assert SCHEMA.names.index("reason") == SCHEMA.names.index("state_raw") + 1
    assert SCHEMA.field("reason").type == pa.string()
