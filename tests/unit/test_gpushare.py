"""GPU-equivalents of GPU GRES types, node layouts and allocations (gpuclust.slurm.gpushare).

The MIG profile names and their compute slices are NVIDIA's, from the MIG user guide's supported-profiles
tables (A100 40/80 GB, H100, H200, A30); the type names with a card prefix are how Slurm's AutoDetect=nvml
names MIG types."""

from __future__ import annotations

from fractions import Fraction

import pytest

from gpuclust.slurm import gpushare as gs
from gpuclust.slurm.parse import parse_tres


@pytest.mark.parametrize(("name", "share"), [
    ("1g.5gb", Fraction(1, 7)), ("2g.10gb", Fraction(2, 7)), ("3g.20gb", Fraction(3, 7)),
    ("4g.20gb", Fraction(4, 7)), ("7g.40gb", Fraction(1)), ("1g.10gb", Fraction(1, 7)),
    ("1g.20gb", Fraction(1, 7)), ("3g.40gb", Fraction(3, 7)), ("1g.18gb", Fraction(1, 7)),
    ("7g.141gb", Fraction(1)), ("1g.10gb+me", Fraction(1, 7)), ("a100_3g.20gb", Fraction(3, 7)),
    ("nvidia_h100_80gb_hbm3_1g.10gb", Fraction(1, 7)),
    ("1g.6gb", Fraction(1, 4)), ("2g.12gb", Fraction(1, 2)), ("4g.24gb", Fraction(1)),
    ("a30_1g.6gb+me", Fraction(1, 4)),
    ("h100", Fraction(1)), ("a100", Fraction(1)), (None, Fraction(1)),
])
def test_type_share(name: str | None, share: Fraction) -> None:
    assert gs.type_share(name) == (share, None)


@pytest.mark.parametrize(("name", "code"), [
    ("5g.40gb", gs.UNKNOWN_PROFILE), ("6g.70gb", gs.UNKNOWN_PROFILE), ("9g.80gb", gs.SLICE_EXCEEDS_CARD),
    ("a30_3g.18gb", gs.UNKNOWN_PROFILE), ("nvidia_a30_7g.24gb", gs.SLICE_EXCEEDS_CARD),
])
def test_bad_profiles_are_unknown_with_a_named_warning(name: str, code: str) -> None:
    share, warning = gs.type_share(name)
    assert share is None and warning is not None and warning.code == code and name in warning.detail


def test_site_override_wins() -> None:
    assert gs.type_share("tiny", {"tiny": Fraction(1, 7)}) == (Fraction(1, 7), None)
    assert gs.type_share("5g.40gb", {"5g.40gb": Fraction(5, 8)}) == (Fraction(5, 8), None)
    assert gs.is_mig_type("tiny", {"tiny": Fraction(1, 7)})


@pytest.mark.parametrize(("text", "value"), [("1/7", Fraction(1, 7)), ("0.25", Fraction(1, 4)), ("1", Fraction(1))])
def test_parse_share(text: str, value: Fraction) -> None:
    assert gs.parse_share(text) == value


@pytest.mark.parametrize("text", ["0", "2", "-1/7", "1/0", "abc", ""])
def test_parse_share_refuses(text: str) -> None:
    with pytest.raises(ValueError, match="share"):
        gs.parse_share(text)


def test_node_layouts() -> None:
    shard = gs.node_layout("gpu:h100:4,shard:32")
    assert (shard.whole_gpus, shard.shards, shard.gpu_equivalents) == (4, 32, 4)
    assert shard.shard_share() == (Fraction(1, 8), None)
    mig = gs.node_layout("gpu:1g.10gb:7")
    assert mig.mig_mode and mig.gpu_equivalents == 1 and mig.gpu_devices == 7
    assert mig.untyped_share() == (Fraction(1, 7), None)
    mps = gs.node_layout("gpu:2,mps:200(S:0)")
    assert mps.mps_share() == (Fraction(1, 100), None)


def test_node_layout_warnings() -> None:
    mixed = gs.node_layout("gpu:a100:1,gpu:3g.40gb:2")
    assert mixed.gpu_equivalents == Fraction(13, 7)
    assert [w.code for w in mixed.warnings] == [gs.MIXED_MIG_AND_FULL]
    assert mixed.untyped_share()[0] is None
    no_gpu = gs.node_layout("shard:8")
    assert gs.SHARDS_WITHOUT_GPU in [w.code for w in no_gpu.warnings]
    assert no_gpu.shard_share()[0] is None
    unknown = gs.node_layout("gpu:5g.40gb:1")
    assert unknown.gpu_equivalents is None


def test_allocation_equivalents() -> None:
    assert gs.allocation_equivalents(parse_tres("gres/gpu=2,gres/gpu:1g.10gb=1,gres/gpu:3g.40gb=1")) \
        == (Fraction(4, 7), [])
    assert gs.allocation_equivalents(parse_tres("cpu=8,gres/gpu=4,gres/gpu:h100=4")) == (Fraction(4), [])
    assert gs.allocation_equivalents(parse_tres("gres/shard=4"), gs.node_layout("gpu:4,shard:32")) \
        == (Fraction(1, 2), [])
    assert gs.allocation_equivalents(parse_tres("gres/shard=4"))[0] is None
    assert gs.allocation_equivalents(parse_tres("gres/mps=50")) == (Fraction(1, 2), [])
