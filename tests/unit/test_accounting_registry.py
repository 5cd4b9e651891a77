"""A sacct field is declared once (gpuclust.accounting.ingest.registry): a new one, given to the readers as one
`SacctField`, flows through the fetch field list, the schema, both text readers and the JSON reader."""

from __future__ import annotations

import re
from pathlib import Path

import pyarrow as pa
import pytest

from gpuclust.accounting.ingest import registry as r
from gpuclust.accounting.ingest import schema, usage
from gpuclust.accounting.ingest.jsonin import parse_json
from gpuclust.accounting.ingest.normalize import ReaderOptions
from gpuclust.accounting.ingest.text import parse_parsable
from gpuclust.slurm import sacct_json as sj

DATA = Path(__file__).resolve().parents[1] / "data" / "accounting"

# Two new fields, each declared in one place: a text one (dictionary-read) and a number parsed from its text.
# (Reason was the text example until issue 16 made it a field of the default registry; Cluster took its place.)
CLUSTER = r.SacctField("Cluster", 30, r.at("cluster"), copy=r.Column("cluster", pa.string()), required=False,
                       dictionary=True)
PRIORITY = r.SacctField(
    "Priority", 31, r.at("priority", lambda v, path: str(sj.count(v, path) or 0)),
    parsed=(r.Column("priority", pa.int64()),), parse=r.parse_count,
    vparse=lambda t: r.Parsed({"priority": r.f.v_int(t)[0]}, r.f.v_int(t)[1]), required=False, dictionary=True,
)
EXTENDED = r.REGISTRY.with_field(CLUSTER).with_field(PRIORITY)

ROW = {
    "JobID": "100", "JobIDRaw": "100", "JobName": "train", "User": "alice", "Account": "ml", "Partition": "gpu",
    "QOS": "normal", "State": "COMPLETED", "ExitCode": "0:0", "Submit": "2026-12-02T10:00:00",
    "Eligible": "2026-12-02T10:00:00", "Start": "2026-12-02T10:00:05", "End": "2026-12-02T11:00:05",
    "Elapsed": "01:00:00", "AllocTRES": "billing=8,cpu=8,gres/gpu=2,gres/gpu:h100=2,mem=64G,node=1",
    "NNodes": "1", "NodeList": "node1", "WCKey": "", "Comment": "team=ml", "Reason": "None", "Cluster": "acct", "Priority": "4294",
}


def _dump(rows: list[dict[str, str]], fields: tuple[str, ...], delimiter: str) -> bytes:
    lines = [delimiter.join(fields)] + [delimiter.join(row.get(f, "") for f in fields) for row in rows]
    return ("\n".join(lines) + "\n").encode()


def test_default_registry_gives_the_documented_lists() -> None:
    # Timelimit (issue 43): fetched last, after NNodes (a fixed format either way)
    assert schema.FETCH_FIELDS[0] == "JobID" and schema.FETCH_FIELDS[-2:] == ("NNodes", "Timelimit")
    # Reason: issue 16 (was a second sacct); SubmitLine: issue 47 (policy replay)
    assert schema.FREE_TEXT_FIELDS == ("JobName", "Reason", "SubmitLine", "Comment")
    assert schema.OPTIONAL_FIELDS == ("Reason", "SubmitLine", *usage.USAGE_FIELDS, "Timelimit", "ReqTRES", "WCKey",
                                      "Comment")
    assert schema.SCHEMA.names[:3] == ["line", "job_id", "job_id_raw"]
    placed = [name for name in schema.SCHEMA.names if name not in dict(usage.COLUMNS)]
    assert placed[-6:] == ["gpus", "gpu_type", "mem_mb", "submit_line", "timelimit_s", "req_tres"]
    # Usage TRES (issue 26): read on step rows, rolled up to the job's columns, never stored as text; a field
    # added since (Timelimit, issue 43; SubmitLine and ReqTRES, issue 47, in registry order) stays after them.
    assert schema.SCHEMA.names[-len(usage.COLUMNS) - 3:-3] == [name for name, _ in usage.COLUMNS]
    assert schema.SCHEMA.names[-3:] == ["submit_line", "timelimit_s", "req_tres"]
    assert r.REGISTRY.step_usage == usage.USAGE_FIELDS
    assert not set(usage.TEXT_COLUMNS) & set(schema.SCHEMA.names)


def test_new_field_is_in_fetch_list_and_schema() -> None:
    assert EXTENDED.fetch[-2:] == ("Cluster", "Priority")
    assert EXTENDED.schema.names[-2:] == ["cluster", "priority"]
    assert EXTENDED.schema.field("priority").type == pa.int64()
    assert "Priority" in EXTENDED.checked and "Cluster" in EXTENDED.dictionary
    with pytest.raises(ValueError):
        r.Registry((*EXTENDED.fields, r.SacctField("Other", 30, r.at("x"), copy=r.Column("reason", pa.string()))))
    with pytest.raises(ValueError, match="fetch place shared by Cluster, Other"):
        r.Registry((*EXTENDED.fields, r.SacctField("Other", 30, r.at("x"), copy=r.Column("other", pa.string()))))
    with pytest.raises(ValueError, match="a field without free text last"):
        r.REGISTRY.with_field(r.SacctField("Other", 40, r.at("x"), copy=r.Column("other", pa.string()), free_text=True,
                                           required=False))


@pytest.mark.parametrize("fast", [True, False])
@pytest.mark.parametrize("delimiter", ["|", "\x1f|\x1e"])
def test_new_field_flows_through_both_text_readers(fast: bool, delimiter: str) -> None:
    rows = [dict(ROW, JobID=str(i), JobIDRaw=str(i), Cluster=f"r{i % 3}", Priority=str(1000 + i)) for i in range(1, 40)]
    rows[5]["Priority"] = "high"  # rejected, and named
    rows[7]["JobName"] = "multi\nline"  # a record the readers join
    data = _dump(rows, EXTENDED.fetch, delimiter)
    res = parse_parsable(data, delimiter, "new.txt", options=ReaderOptions(registry=EXTENDED, fast=fast, strict=True))
    assert res.reader == ("direct" if fast else "reference")
    assert [(p.line, p.field) for p in res.problems] == [(7, "Priority")]
    table = res.table.cast(EXTENDED.schema)
    assert table.schema.equals(EXTENDED.schema)
    kept = [row for k, row in enumerate(rows) if k != 5]
    assert table.column("cluster").to_pylist() == [row["Cluster"] for row in kept]
    assert table.column("priority").to_pylist() == [int(row["Priority"]) for row in kept]
    # The default registry reads the same file without the new columns (extra columns are ignored).
    plain = parse_parsable(data, delimiter, "new.txt", options=ReaderOptions(fast=fast))
    assert "cluster" not in plain.table.column_names and plain.table.num_rows == len(rows)


def test_new_field_is_optional_in_old_dumps() -> None:
    """An optional text field absent from a dump reads as "" (a parsed one must then accept "" or be required)."""
    data = _dump([ROW], schema.RAW_FIELDS, "|")
    res = parse_parsable(data, "|", "old.txt", options=ReaderOptions(registry=r.REGISTRY.with_field(CLUSTER)))
    assert res.problems == [] and res.table.column("cluster").to_pylist() == [""]


@pytest.mark.parametrize("path", ["lab-json.json", "24.11/lab-json.json", "26.05/lab-json.json"])
def test_new_field_flows_through_the_json_reader(path: str) -> None:
    data = (DATA / path).read_bytes()
    res = parse_json(data, path, options=ReaderOptions(registry=EXTENDED))
    assert res.reader == "json"
    assert res.table.schema.equals(EXTENDED.schema)
    assert set(res.table.column("cluster").to_pylist()) == {res.table.column("cluster")[0].as_py()} != {""}
    priorities = res.table.column("priority").to_pylist()
    assert all(p >= 0 for p in priorities) and any(p > 0 for p in priorities)
    base = parse_json(data, path)
    assert res.table.select(base.table.column_names).equals(base.table)


def test_json_path_per_shape() -> None:
    """A field whose path differs by data_parser version declares the override with the field."""
    by_shape = r.SacctField("Cluster", 30, r.at("cluster"), copy=r.Column("cluster", pa.string()),
                            required=False, json_by_shape={"data_parser/v0.0.42": lambda a, job: "from-42"})
    reg = r.REGISTRY.with_field(by_shape)
    new = parse_json((DATA / "24.11/lab-json.json").read_bytes(), "x", options=ReaderOptions(registry=reg))
    old = parse_json((DATA / "lab-json.json").read_bytes(), "x", options=ReaderOptions(registry=reg))
    assert set(new.table.column("cluster").to_pylist()) == {"from-42"}
    assert "from-42" not in old.table.column("cluster").to_pylist()


def test_every_column_is_described() -> None:
    """The store's schema file sends an engine to these docstrings for what a column means."""
    described = (schema.__doc__ or "") + (usage.__doc__ or "")
    missing = [name for name in schema.STORE_SCHEMA.names if not re.search(rf"(^|[\s`,]){name}\b", described)]
    assert not missing, f"gpuclust/accounting/ingest/schema.py's table of columns lacks {missing}"
