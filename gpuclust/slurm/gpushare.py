"""GPU-equivalents: how much of one physical GPU a GPU GRES is (see the glossary's "GPU-equivalent").

A whole GPU is 1. A MIG slice is read from its profile name (`1g.10gb`, `3g.40gb`, `a100_3g.20gb`,
`nvidia_h100_80gb_hbm3_1g.10gb`, `1g.10gb+me`): N of the card's compute slices, 7 on A100/H100/H200/B200 and 4
on A30. A shard is 1 / the node's shards per GPU (`Gres=gpu:4,shard:32`: 1/8); MPS is its share of the node's
MPS count per GPU (100 by Slurm's convention). A site that names its types its own way gives the share of a
type in the config (`[gpu_type NAME] gpu_share = 1/7`).

Every function answers a share or None with a named warning: an unknown profile, a slice larger than its
card, shards on a node without GPUs, MIG slices and whole GPUs on one node. None is an unknown share, never
a silent whole GPU. Every plane reads shares here: accounting (GPU-equivalent hours, capacity, prices),
telemetry (which series is a MIG instance), policy (quotas in GPU-equivalents), audit (a node's layout)."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from fractions import Fraction

from gpuclust.slurm.parse import Gres, parse_gres

# Compute slices per card. A30 is the one 4-slice card; its profiles share no name with a 7-slice card's.
CARD_SLICES_DEFAULT = 7
_A30_PROFILES = frozenset({"1g.6gb", "2g.12gb", "4g.24gb"})
# Slice counts NVIDIA defines on a 7-slice card (there is no 5g or 6g profile).
_VALID_SLICES = {7: frozenset({1, 2, 3, 4, 7}), 4: frozenset({1, 2, 4})}
MPS_PER_GPU_DEFAULT = 100
# The same facts under public names, for the submit policy's rendered tables (gpuclust/policy/render.py).
A30_PROFILES = _A30_PROFILES
VALID_SLICES = _VALID_SLICES

# <optional card prefix>_<N>g.<M>gb[+me|+gfx|-me]; Slurm's AutoDetect=nvml prefixes the card's name.
_MIG_NAME = re.compile(r"^(?:(?P<card>.*?)[_-])?(?P<slices>[0-9]+)g\.(?P<mem>[0-9]+)gb(?P<extra>[+-][a-z]+)?$",
                       re.IGNORECASE)

# Warning codes: stable names a report or a test can match.
UNKNOWN_PROFILE = "unknown_mig_profile"
SLICE_EXCEEDS_CARD = "mig_slice_exceeds_card"
SHARDS_WITHOUT_GPU = "shards_without_gpu"
MPS_WITHOUT_GPU = "mps_without_gpu"
MIXED_MIG_AND_FULL = "mixed_mig_and_full_gpus"
UNTYPED_ON_MIXED_NODE = "untyped_gpu_on_mixed_node"
BAD_SHARE = "bad_gpu_share"


@dataclass(frozen=True)
class ShareWarning:
    """A GPU-share warning: its stable code (UNKNOWN_PROFILE and the others above) and its detail."""

    code: str
    detail: str

    def __str__(self) -> str:
        return f"{self.code}: {self.detail}"


@dataclass(frozen=True)
class MigProfile:
    """A MIG profile name read: `3g.40gb` is 3 of 7 compute slices with 40 GB."""

    name: str           # the profile alone, lower case: 3g.40gb, 1g.10gb+me
    compute_slices: int
    memory_gb: int
    card_slices: int
    card: str | None    # the card prefix Slurm gave the type, if any (a100, nvidia_h100_80gb_hbm3)

    @property
    def share(self) -> Fraction:
        return Fraction(self.compute_slices, self.card_slices)


def parse_share(text: str) -> Fraction:
    """A configured share: `1/7`, `0.25`, `3/7`. In (0, 1]; ValueError with a message otherwise."""
    raw = text.strip()
    try:
        value = Fraction(raw)
    except (ValueError, ZeroDivisionError):
        raise ValueError(f"expected a share of one GPU such as 1/7 or 0.25, got {text!r}") from None
    if not 0 < value <= 1:
        raise ValueError(f"a share of one GPU is in (0, 1], got {text!r}")
    return value


def mig_profile(type_name: str | None) -> MigProfile | None:
    """The MIG profile a GRES type names, or None when the type is not a MIG name (`h100`, `a100`)."""
    if not type_name:
        return None
    match = _MIG_NAME.match(type_name)
    if not match:
        return None
    slices, mem = int(match.group("slices")), int(match.group("mem"))
    extra = (match.group("extra") or "").lower()
    base = f"{slices}g.{mem}gb"
    card = match.group("card") or None
    card_slices = 4 if base in _A30_PROFILES or (card is not None and "a30" in card.lower()) else CARD_SLICES_DEFAULT
    return MigProfile(base + extra, slices, mem, card_slices, card)


def type_share(type_name: str | None, overrides: Mapping[str, Fraction] | None = None
               ) -> tuple[Fraction | None, ShareWarning | None]:
    """Share of one physical GPU of one GPU GRES of `type_name` (None: untyped, a whole GPU).

    The site's override wins; a MIG name gives its slices; a profile-like name NVIDIA does not define (5g,
    a slice larger than its card) is unknown with a warning; any other name is a whole GPU."""
    if type_name is not None and overrides and type_name in overrides:
        return overrides[type_name], None
    profile = mig_profile(type_name)
    if profile is None:
        return Fraction(1), None
    if profile.compute_slices > profile.card_slices:
        return None, ShareWarning(SLICE_EXCEEDS_CARD, f"GPU type {type_name!r}: {profile.compute_slices} compute "
                                  f"slices on a card of {profile.card_slices}")
    if profile.compute_slices not in _VALID_SLICES[profile.card_slices]:
        return None, ShareWarning(UNKNOWN_PROFILE, f"GPU type {type_name!r}: no MIG profile has "
                                  f"{profile.compute_slices} of {profile.card_slices} compute slices; give its "
                                  f"share with [gpu_type {type_name}] gpu_share")
    return profile.share, None


def is_mig_type(type_name: str | None, overrides: Mapping[str, Fraction] | None = None) -> bool:
    """Whether a GPU GRES type is a MIG slice (by name, or a site share below one GPU)."""
    if type_name is not None and overrides and type_name in overrides:
        return overrides[type_name] < 1
    return mig_profile(type_name) is not None


@dataclass(frozen=True)
class NodeLayout:
    """A node's GPU GRES as physical GPUs: whole GPUs, MIG slices by type, shards and MPS."""

    whole_gpus: int = 0
    slices: dict[str, int] = field(default_factory=dict)     # MIG type -> count
    shards: int = 0
    mps: int = 0
    gpu_equivalents: Fraction | None = Fraction(0)           # None: a slice of unknown share
    warnings: tuple[ShareWarning, ...] = ()
    # the site's shares the layout was read with ([gpu_type NAME] gpu_share): an untyped GPU's share reads them too
    overrides: tuple[tuple[str, Fraction], ...] = ()

    @property
    def gpu_devices(self) -> int:
        return self.whole_gpus + sum(self.slices.values())

    @property
    def mig_mode(self) -> bool:
        return bool(self.slices)

    @property
    def mixed(self) -> bool:
        return bool(self.slices) and self.whole_gpus > 0

    @property
    def physical_gpus(self) -> int | None:
        """The physical cards the layout fills: its GPU-equivalents rounded up (a MIG node's slices sum to the
        shares of their cards; a card whose slices Slurm does not all declare counts for less). None where a
        slice's share is unknown. A node's own report (nvidia-smi) is the better count where there is one."""
        return None if self.gpu_equivalents is None else math.ceil(self.gpu_equivalents)

    def shard_share(self) -> tuple[Fraction | None, ShareWarning | None]:
        """Share of one GPU of one shard here: the node's GPUs / its shards."""
        return _per_unit(self.shards, self.gpu_equivalents, SHARDS_WITHOUT_GPU, "shard")

    def mps_share(self) -> tuple[Fraction | None, ShareWarning | None]:
        """Share of one GPU of one MPS unit here: the node's GPUs / its MPS count (1/100 without MPS GRES)."""
        if not self.mps:
            return Fraction(1, MPS_PER_GPU_DEFAULT), None
        return _per_unit(self.mps, self.gpu_equivalents, MPS_WITHOUT_GPU, "MPS")

    def untyped_share(self) -> tuple[Fraction | None, ShareWarning | None]:
        """Share of one untyped `gres/gpu` here: a whole GPU, unless the node has MIG slices."""
        if not self.slices:
            return Fraction(1), None
        if not self.whole_gpus and len(self.slices) == 1:
            share, warning = type_share(next(iter(self.slices)), dict(self.overrides))
            return share, warning
        return None, ShareWarning(UNTYPED_ON_MIXED_NODE, "an untyped GPU count on a node with MIG slices of "
                                  "several kinds cannot be priced: it is unknown")


def _per_unit(units: int, gpus: Fraction | None, code: str, what: str
              ) -> tuple[Fraction | None, ShareWarning | None]:
    if not units:
        return None, None
    if gpus is None:
        return None, None
    if gpus == 0:
        return None, ShareWarning(code, f"{units} {what} units on a node with no GPU")
    return gpus / units, None


def node_layout(gres: str | list[Gres] | None, overrides: Mapping[str, Fraction] | None = None) -> NodeLayout:
    """A node's configured Gres (`gpu:h100:4,shard:32`, `gpu:1g.10gb:7`, `gpu:a100:1,gpu:3g.40gb:2`)."""
    items = parse_gres(gres) if isinstance(gres, str) or gres is None else gres
    whole = shards = mps = 0
    slices: dict[str, int] = {}
    total: Fraction | None = Fraction(0)
    warnings: list[ShareWarning] = []
    for item in items:
        if item.name == "shard":
            shards += item.count
        elif item.name == "mps":
            mps += item.count
        elif item.name == "gpu":
            share, warning = type_share(item.type, overrides)
            if warning:
                warnings.append(warning)
            if is_mig_type(item.type, overrides):
                slices[item.type or ""] = slices.get(item.type or "", 0) + item.count
            else:
                whole += item.count
            total = None if share is None or total is None else total + share * item.count
    if slices and whole:
        warnings.append(ShareWarning(MIXED_MIG_AND_FULL, f"{whole} whole GPU(s) beside MIG slices "
                                     f"{', '.join(f'{k}:{n}' for k, n in sorted(slices.items()))}"))
    given = tuple(sorted(overrides.items())) if overrides else ()
    layout = NodeLayout(whole, slices, shards, mps, total, tuple(warnings), given)
    for unit_share in (layout.shard_share, layout.mps_share):
        _, warning = unit_share()
        if warning:
            warnings.append(warning)
    return NodeLayout(whole, slices, shards, mps, total, tuple(warnings), given)


def allocation_equivalents(tres: Mapping[str, str], layout: NodeLayout | None = None,
                           overrides: Mapping[str, Fraction] | None = None
                           ) -> tuple[Fraction | None, list[ShareWarning]]:
    """GPU-equivalents of one allocation's TRES (`gres/gpu=2,gres/gpu:3g.40gb=2,gres/shard=4`).

    Typed keys count by their share; GPUs of the untyped total beyond the typed ones count as the node's
    untyped share (a whole GPU without a layout); shards and MPS by the layout's share per unit (shards are
    unknown without a layout; MPS is 1/100 per unit). None when any part is unknown."""
    warnings: list[ShareWarning] = []
    total: Fraction | None = Fraction(0)

    def add(share: Fraction | None, warning: ShareWarning | None, count: int) -> None:
        nonlocal total
        if warning:
            warnings.append(warning)
        total = None if share is None or total is None else total + share * count

    typed = 0
    for key, value in tres.items():
        if key.startswith("gres/gpu:"):
            count = int(value)
            typed += count
            add(*type_share(key[len("gres/gpu:"):], overrides), count)
    untyped = int(tres["gres/gpu"]) if "gres/gpu" in tres else typed
    if untyped > typed:
        add(*(layout.untyped_share() if layout else (Fraction(1), None)), untyped - typed)
    shards = int(tres.get("gres/shard", 0) or 0)
    if shards:
        add(*(layout.shard_share() if layout else (None, None)), shards)
    mps = int(tres.get("gres/mps", 0) or 0)
    if mps:
        add(*(layout.mps_share() if layout else (Fraction(1, MPS_PER_GPU_DEFAULT), None)), mps)
    return total, warnings
