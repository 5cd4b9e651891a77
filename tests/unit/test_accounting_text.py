"""The --parsable2 front end: never crashes, never drops a row silently, for any job name or comment."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuclust.accounting.ingest.jsonin import parse_input
from gpuclust.accounting.ingest.registry import REGISTRY
from gpuclust.accounting.ingest.schema import FETCH_DELIMITER, FETCH_FIELDS, FREE_TEXT_FIELDS, RAW_FIELDS
from gpuclust.accounting.ingest.text import decode_delimiter, parse_parsable
from gpuclust.errors import InputError

ROW = {
    "JobID": "100", "JobIDRaw": "100", "JobName": "train", "User": "alice", "Account": "ml", "Partition": "gpu",
    "QOS": "normal", "State": "COMPLETED", "ExitCode": "0:0", "Submit": "2026-12-02T10:00:00",
    "Eligible": "2026-12-02T10:00:00", "Start": "2026-12-02T10:00:05", "End": "2026-12-02T11:00:05",
    "Elapsed": "01:00:00", "AllocTRES": "billing=8,cpu=8,gres/gpu=2,gres/gpu:h100=2,mem=64G,node=1",
    "NNodes": "1", "NodeList": "node1", "WCKey": "", "Comment": "team=ml project=x", "Reason": "None",
}


def dump(rows: list[dict[str, str]], delimiter: str, fields=FETCH_FIELDS) -> bytes:
    lines = [delimiter.join(fields)] + [delimiter.join(r.get(f, "") for f in fields) for r in rows]
    return ("\n".join(lines) + "\n").encode("utf-8")


def test_multichar_delimiter_and_newline_in_name():
    rows = [dict(ROW, JobID=str(i), JobIDRaw=str(i), JobName=n) for i, n in
            enumerate(["a|b", "multi\nline", "x\n\ny", 'q"uote\'s', "ünï©ødé", "", "\n"], start=1)]
    result = parse_parsable(dump(rows, FETCH_DELIMITER), FETCH_DELIMITER)
    assert result.problems == []
    assert result.table.column("job_name").to_pylist() == [r["JobName"] for r in rows]
    # Line numbers point at the physical line each record starts on.
    assert result.table.column("line").to_pylist() == [2, 3, 5, 8, 9, 10, 11]


def test_pipe_dump_with_pipes_in_name_and_comment_is_repaired_or_reported():
    rows = [dict(ROW, JobName="a|b"), dict(ROW, JobID="101", JobIDRaw="101", Comment="team=ml|x"),
            dict(ROW, JobID="102", JobIDRaw="102", JobName="p|q", Comment="c|d")]
    # In sacct's usual order (Comment last) the other fields pin down where each `|` belongs.
    result = parse_parsable(dump(rows, "|", RAW_FIELDS), "|")
    assert result.table.num_rows == 3 and result.rejected == 0
    got = dict(zip(result.table.column("job_id").to_pylist(), result.table.column("job_name").to_pylist(), strict=True))
    assert got["100"] == "a|b"
    comments = dict(zip(result.table.column("job_id").to_pylist(), result.table.column("comment").to_pylist(), strict=True))
    assert comments["101"] == "team=ml|x"
    assert (got["102"], comments["102"]) == ("p|q", "c|d")
    # With JobName and Comment side by side a `|` is truly ambiguous: reported with its line, not guessed.
    result = parse_parsable(dump(rows, "|", FETCH_FIELDS), "|", "d")
    assert result.table.num_rows == 0 and [p.line for p in result.problems] == [2, 3, 4]


def test_bad_rows_reported_with_line_numbers_not_dropped():
    rows = [ROW, dict(ROW, JobID="1x"), dict(ROW, JobID="102", Start="yesterday"), dict(ROW, JobID="103", Elapsed="1h"),
            dict(ROW, JobID="104", AllocTRES="gres/gpu=two"), dict(ROW, JobID="105", ExitCode="x")]
    result = parse_parsable(dump(rows, "|"), "|", "dump.txt")
    assert result.table.num_rows == 1 and result.rejected == 5
    assert [(p.file, p.line, p.field) for p in result.problems] == [
        ("dump.txt", 3, "JobID"), ("dump.txt", 4, "Start"), ("dump.txt", 5, "Elapsed"),
        ("dump.txt", 6, "AllocTRES"), ("dump.txt", 7, "ExitCode")]


def test_short_record_at_end_is_reported():
    data = dump([ROW], "|") + b"200|200|truncated\n"
    result = parse_parsable(data, "|", "d")
    assert result.table.num_rows == 1 and result.rejected == 1 and result.problems[0].line == 3


def test_steps_dropped_and_counted_and_fields_in_any_order():
    fields = tuple(reversed(RAW_FIELDS[:-2]))  # no WCKey/Comment, reversed order
    rows = [ROW, dict(ROW, JobID="100.batch", JobIDRaw="100.batch"), dict(ROW, JobID="100.extern", JobIDRaw="100.extern"),
            dict(ROW, JobID="100.0", JobIDRaw="100.0")]
    result = parse_parsable(dump(rows, ";", fields), ";")
    assert result.table.num_rows == 1 and result.steps_dropped == 3 and result.rejected == 0
    row = result.table.to_pylist()[0]
    assert (row["gpus"], row["gpu_type"], row["mem_mb"], row["elapsed_s"], row["comment"]) == (2, "h100", 65536.0, 3600, "")


def test_missing_required_field_is_an_input_error():
    with pytest.raises(InputError, match="State"):
        parse_parsable(b"JobID|JobIDRaw\n1|1\n", "|")
    with pytest.raises(InputError, match="header"):
        parse_parsable(dump([ROW], FETCH_DELIMITER), "|")  # wrong delimiter: says what it saw


def test_unknown_times_and_states():
    rows = [dict(ROW, State="CANCELLED by 0", Start="None", End="2026-12-02T10:01:00", Elapsed="00:00:00"),
            dict(ROW, JobID="7_[1-5]", JobIDRaw="7", State="PENDING", Start="Unknown", End="Unknown", Eligible="Unknown")]
    table = parse_parsable(dump(rows, "|"), "|").table.to_pylist()
    assert table[0]["state"] == "CANCELLED" and table[0]["state_raw"] == "CANCELLED by 0" and table[0]["start"] is None
    assert table[1]["array_pending"] == "1-5" and table[1]["eligible"] is None and table[1]["end"] is None


def test_decode_delimiter():
    assert decode_delimiter("\\x1f|\\x1e") == FETCH_DELIMITER
    assert decode_delimiter("|") == "|"
    with pytest.raises(InputError):
        decode_delimiter("")


# ---- property: any name or comment ------------------------------------------------------------------

_free_text = st.lists(
    st.one_of(st.sampled_from(list("|\n\"'`\\ ,;=:\x1f\x1e") + ["\x1f|\x1e", "é", "名", "🙂", "0", "team=ml"]),
              st.characters(blacklist_categories=("Cs",))),
    max_size=12,
).map("".join)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(_free_text, _free_text), min_size=1, max_size=8),
       st.sampled_from([FETCH_DELIMITER, "|", ";"]))
def test_any_name_or_comment_never_crashes_never_silently_drops(pairs, delimiter):
    rows = [dict(ROW, JobID=str(1000 + i), JobIDRaw=str(1000 + i), JobName=n.replace("\r", ""), Comment=c.replace("\r", ""))
            for i, (n, c) in enumerate(pairs)]
    result = parse_input(dump(rows, delimiter), delimiter)
    # Every record is either in the table or reported as a problem with a line number.
    assert result.table.num_rows + result.rejected >= 1
    assert all(p.line is not None and p.line >= 2 for p in result.problems)
    parsed = {r["job_id"]: r for r in result.table.to_pylist()}
    reported_lines = {p.line for p in result.problems}
    for row in rows:
        got = parsed.get(row["JobID"])
        clean = delimiter not in row["JobName"] + row["Comment"]
        if got is not None:
            # Whatever is accepted is right: never a shifted or truncated record.
            assert (got["job_name"], got["comment"], got["state"], got["gpus"]) == (row["JobName"], row["Comment"], "COMPLETED", 2)
        else:
            assert not clean or "\n" in row["JobName"] + row["Comment"], row
            assert reported_lines, row
    if all(delimiter not in r["JobName"] + r["Comment"] for r in rows) and not any(
        r["JobName"].startswith("\n") for r in rows
    ):
        assert result.rejected == 0 and result.table.num_rows == len(rows)


@pytest.mark.parametrize("delimiter", ["|", FETCH_DELIMITER])
def test_impossible_time_is_reported_with_its_line_not_a_crash(delimiter):
    """A time of the right shape but an impossible value (month 13), also inside a record that needs
    repair because its name holds the delimiter, is a located problem; the other rows survive."""
    rows = [
        dict(ROW, JobID="1", JobIDRaw="1"),
        dict(ROW, JobID="2", JobIDRaw="2", Start="2026-13-01T00:00:00"),
        dict(ROW, JobID="3", JobIDRaw="3", JobName="a|b", End="2026-02-30T00:00:00"),
        dict(ROW, JobID="4", JobIDRaw="4"),
    ]
    result = parse_parsable(dump(rows, delimiter), delimiter)
    kept = result.table.column("job_id").to_pylist()
    assert "1" in kept and "4" in kept
    reported_lines = {p.line for p in result.problems}
    assert 3 in reported_lines and "2" not in kept
    assert len(kept) + len(result.problems) == len(rows)


# A record as a complete dump holds it, with the optional fields filled, and with them empty (as most jobs have
# them): a `|` must be placeable either way.
_FILLED = dict(ROW, SubmitLine="sbatch train.sh", Timelimit="02:00:00", ReqTRES="billing=8,cpu=8,gres/gpu=2,node=1",
               WCKey="proj")
_EMPTY = dict(ROW, SubmitLine="", Timelimit="", ReqTRES="", WCKey="", Reason="")
_FREE_SETS = [names for k in (1, 2) for names in itertools.combinations(FREE_TEXT_FIELDS, k)]


@pytest.mark.parametrize("base", [_FILLED, _EMPTY], ids=["filled", "empty"])
@pytest.mark.parametrize("names", _FREE_SETS, ids=["+".join(n) for n in _FREE_SETS])
def test_a_pipe_in_any_free_text_field_is_placed_in_a_plain_dump(base, names):
    """A plain `|` dump (sacct -P) of the registry's fields in their order: a `|` in one free-text field, or in
    two, goes back where it belongs, because the fields around each free-text field refuse what a shift would
    give them. A free-text field placed where they do not (next to fields that take "" or any text) fails here."""
    plain = parse_parsable(dump([base], "|", RAW_FIELDS), "|", "d")
    assert plain.problems == [] and plain.table.num_rows == 1, f"the test record lacks a field: {plain.problems[:1]}"
    row = dict(base, **{name: f"{name.lower()}|x" for name in names})
    result = parse_parsable(dump([row], "|", RAW_FIELDS), "|", "d")
    placed = result.table.num_rows == 1 and all(
        result.table.column(REGISTRY[name].copy.name).to_pylist() == [row[name]] for name in names)
    assert placed, (f"a `|` in {' and '.join(names)} cannot be placed in a plain dump of FIELDS' order "
                    f"({[p.message for p in result.problems][:1]}): move the field in registry.FIELDS next to "
                    "fields whose parsers refuse both \"\" and text (README, \"A new sacct field\")")
