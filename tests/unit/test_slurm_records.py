"""One node model at the Slurm edge (gpuclust.slurm.records.NodeRecord): the audit's checks and the unit
economics' capacity read the same record, parsed once, from the same real `scontrol -d -o show node` recordings
of each release (tests/data/audit/*/README.md says how each was recorded on the lab)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuclust.accounting.history.events import Node, parse_nodes
from gpuclust.slurm.parse import parse_scontrol_oneliners
from gpuclust.slurm.records import node_from_scontrol, parse_nodes_text

DATA = Path(__file__).resolve().parents[1] / "data"
RECORDINGS = sorted((DATA / "audit").glob("**/scontrol_d_show_node_o.txt"))


def test_recordings_are_found() -> None:
    assert len(RECORDINGS) >= 9  # three scenarios on 22.05, 24.11 and 26.05


@pytest.mark.parametrize("path", RECORDINGS, ids=lambda p: str(p.relative_to(DATA)))
def test_economics_node_is_a_view_of_the_audit_record(path: Path) -> None:
    text = path.read_text()
    records = parse_nodes_text(text)
    assert [Node.of(r) for r in records] == parse_nodes(text)
    for record, fields in zip(records, parse_scontrol_oneliners(text), strict=True):
        gpus, types = record.capacity_gpus()
        # the lab's nodes configure their GPUs in both places, so the two counts agree here; the types come from
        # CfgTRES's typed keys, which a node reports only where AccountingStorageTRES names gres/gpu:<type>
        assert gpus == record.gpu_count and sum(types.values()) in (0, gpus)
        assert record.partitions == tuple(fields["Partitions"].split(","))  # Slurm's order, not sorted


def test_capacity_counts_the_configured_tres_first_and_the_gres_without_it() -> None:
    line = ("NodeName=n1 State=IDLE Gres=gpu:a100:2,gpu:h100:2 Partitions=b,a "
            "CfgTRES=cpu=8,mem=16000M,gres/gpu=3,gres/gpu:h100=3")
    record = node_from_scontrol(next(iter(parse_scontrol_oneliners(line))))
    assert record.capacity_gpus() == (3, {"h100": 3}) and record.gpu_count == 4
    assert record.partitions == ("b", "a")
    without = node_from_scontrol(next(iter(parse_scontrol_oneliners(line.split(" CfgTRES=")[0]))))
    assert without.capacity_gpus() == (4, {"a100": 2, "h100": 2})
