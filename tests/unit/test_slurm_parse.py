from datetime import datetime, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpuclust.errors import SlurmOutputError
from gpuclust.slurm import hostlist
from gpuclust.slurm.parse import (
    Gres,
    format_slurm_duration,
    gpu_count,
    gpu_type,
    gpu_types,
    parse_gres,
    parse_memory_mb,
    parse_parsable,
    parse_scontrol_oneliners,
    parse_scontrol_record,
    parse_slurm_duration,
    parse_slurm_time,
    parse_tres,
)


def test_tres_gpu_count_and_type():
    tres = parse_tres("billing=8,cpu=8,gres/gpu=2,gres/gpu:h100=2,mem=64G,node=1")
    assert gpu_count(tres) == 2
    assert gpu_type(tres) == "h100"
    assert parse_tres("") == {}
    assert gpu_count(parse_tres("cpu=1,mem=1G,node=1")) == 0
    assert gpu_type(parse_tres("gres/gpu=3")) is None
    mixed = parse_tres("gres/gpu=3,gres/gpu:a100=1,gres/gpu:h100=2")
    assert gpu_types(mixed) == {"a100": 1, "h100": 2}
    assert gpu_type(mixed) == "h100"


def test_tres_rejects_garbage():
    with pytest.raises(SlurmOutputError, match="bad TRES item"):
        parse_tres("cpu=1,garbage")


@pytest.mark.parametrize(
    "text,expected",
    [
        ("gpu:h100:4(S:0-1)", [Gres("gpu", "h100", 4, "S:0-1")]),
        ("gpu:2", [Gres("gpu", None, 2)]),
        ("gpu", [Gres("gpu", None, 1)]),
        ("gres:gpu:h100:2", [Gres("gpu", "h100", 2)]),
        ("gpu:h100:2(IDX:0,2)", [Gres("gpu", "h100", 2, "IDX:0,2")]),
        ("gpu:h100:4(S:0),shard:8", [Gres("gpu", "h100", 4, "S:0"), Gres("shard", None, 8)]),
        ("(null)", []),
    ],
)
def test_gres_forms(text, expected):
    assert parse_gres(text) == expected


def test_scontrol_values_with_spaces_survive():
    line = (
        "NodeName=node2 Arch=x86_64 CoresPerSocket=1 Gres=gpu:h100:4 State=IDLE+DRAIN "
        "Reason=GPU 3 ECC errors: uncorrectable, replace board [root@2026-12-01T09:00:00] Comment=(null)"
    )
    rec = parse_scontrol_record(line)
    assert rec["Reason"] == "GPU 3 ECC errors: uncorrectable, replace board [root@2026-12-01T09:00:00]"
    assert rec["State"] == "IDLE+DRAIN"
    assert rec["Comment"] == "(null)"
    assert len(parse_scontrol_oneliners(line + "\n\n" + line.replace("node2", "node3"))) == 2


def test_parsable_table_and_bad_line():
    rows = parse_parsable("Name|GrpTRES\nnormal|\ngpu|gres/gpu=8\n")
    assert rows == [{"Name": "normal", "GrpTRES": ""}, {"Name": "gpu", "GrpTRES": "gres/gpu=8"}]
    with pytest.raises(SlurmOutputError, match="line 2"):
        parse_parsable("A|B\nx|y|z\n")


@pytest.mark.parametrize(
    "text,seconds",
    [("00:05", 5), ("01:02:03", 3723), ("2-01:00:00", 176400), ("05:00", 300), ("1-00:00", 86400), ("1-02:03", 93780),
     ("UNLIMITED", -1), ("Partition_Limit", -1), ("Unknown", None), ("", None), ("2-12", 216000), ("30", 1800)],
)
def test_slurm_durations(text, seconds):
    assert parse_slurm_duration(text) == seconds


@pytest.mark.parametrize("seconds,text", [(0, "00:00:00"), (59, "00:00:59"), (3723, "01:02:03"),
                                          (86399, "23:59:59"), (86400, "1-00:00:00"), (176461, "2-01:01:01")])
def test_slurm_duration_written_as_slurm_writes_it(seconds, text):
    assert format_slurm_duration(seconds) == text


@given(st.integers(min_value=0, max_value=10**9))
def test_slurm_duration_written_reads_back(seconds):
    assert parse_slurm_duration(format_slurm_duration(seconds)) == seconds


def test_times_and_memory():
    assert parse_slurm_time("2026-12-02T10:58:03") == datetime(2026, 12, 2, 10, 58, 3, tzinfo=timezone.utc)
    assert parse_slurm_time("Unknown") is None
    assert parse_slurm_time("None") is None
    with pytest.raises(SlurmOutputError):
        parse_slurm_time("yesterday")
    assert parse_memory_mb("64G") == 65536
    assert parse_memory_mb("16000") == 16000
    assert parse_memory_mb("4000Mn") == 4000


def test_hostlist_uses_nodeset():
    assert sorted(hostlist.expand("node[1-3],gpu7")) == ["gpu7", "node1", "node2", "node3"]
    assert hostlist.fold(["node1", "node2", "node3", "node5"]) == "node[1-3,5]"
    assert hostlist.expand("(null)") == []


@given(st.from_regex(r"[A-Za-z0-9_.-]{1,20}", fullmatch=True))
def test_one_name_is_what_nodeset_gives(name: str) -> None:
    # hostlist.expand answers a lone name without ClusterShell: it must be NodeSet's own answer
    from ClusterShell.NodeSet import NodeSet, NodeSetParseError

    try:
        expected = list(NodeSet(name))
    except NodeSetParseError:
        return
    assert hostlist.expand(name) == expected
