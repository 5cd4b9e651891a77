"""The announced topology against what an acceptance job saw on each node.

Announced (site config, per partition): gpus_per_node, nics_per_node, nic_speed_mbps, nvlink, and nic_names
(globs choosing which interfaces count as the fabric NICs; default every interface but loopback).

Seen (recorded by every acceptance job on each node's local rank 0, in the rank line's `topology` key):
- gpus: CUDA devices torch sees (`cuda_devices`), the GPU device files on the node (`device_files`, the rank
  record's devices_found) and the node's configured GRES count (`gres_gpus`, from the job record);
- `nics`: {interface: speed in Mb/s or null}, the interfaces of the job's own network namespace
  (socket.if_nameindex) with their speed from /sys/class/net/IF/speed; where that sysfs belongs to another
  namespace (its ifindex differs, as in the Slurm lab, whose nodes are network namespaces sharing the host's
  /sys) the speed comes from the ethtool ioctl on the interface itself (`nic_speed_source`);
- `nvidia_smi_topo`: the text of `nvidia-smi topo -m` where nvidia-smi exists, and `nvlink`: whether its
  matrix has an NV# link (null when there is no matrix).

`accept report` compares the two (check "topology"): a mismatch is CRITICAL, NVLink announced but not
verifiable (no nvidia-smi) is WARNING; the comparison itself is kept in report.json under "topology".

A MIG node is counted in physical GPUs (MigCards): Slurm declares one GPU GRES per MIG instance
(gpu:1g.10gb:4,gpu:3g.40gb:1 is 5) while its device files are the cards (/dev/nvidiaN; the instances are
/dev/nvidia-caps/*). Its cards are the count nvidia-smi gave in the job's health snapshot where there is one, else
the layout's GPU-equivalents rounded up (gpuclust.slurm.gpushare.node_layout). A partition that announces the
node's MIG instances (gpus_per_node = Slurm's GPU count there, as the audit reads it) announces those cards.
"""

from __future__ import annotations

import array
import fcntl
import fnmatch
import os
import re
import socket
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

from gpuclust.accept import results as R
from gpuclust.config.site import PartitionConfig
from gpuclust.exitcodes import Nagios
from gpuclust.findings import Finding

SIOCETHTOOL = 0x8946
ETHTOOL_GSET = 0x00000001
_NV_LINK = re.compile(r"^NV\d+$")


# ---- seen (runs inside the job) ---------------------------------------------------------------------


def ethtool_speed(name: str) -> int | None:
    """Link speed in Mb/s by the ETHTOOL_GSET ioctl (struct ethtool_cmd: speed at byte 12, speed_hi at 28);
    None when the driver has none (loopback) or reports unknown (0xffff / 0xffffffff)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        cmd = array.array("B", struct.pack("I", ETHTOOL_GSET) + b"\0" * 40)
        ifreq = struct.pack("16sP", name.encode()[:15], cmd.buffer_info()[0])
        fcntl.ioctl(sock.fileno(), SIOCETHTOOL, ifreq)
        raw = cmd.tobytes()
        speed = (struct.unpack_from("H", raw, 28)[0] << 16) | struct.unpack_from("H", raw, 12)[0]
    except OSError:
        return None
    finally:
        sock.close()
    return None if speed in (0, 0xFFFF, 0xFFFFFFFF) else speed


def _read_int(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    return int(text) if re.fullmatch(r"-?[0-9]+", text) else None


def nic_speeds(sys_net: str = "/sys/class/net") -> tuple[dict[str, int | None], str]:
    """{interface: Mb/s or None} for this network namespace's interfaces except loopback, and where the
    speeds came from: "sysfs", "ethtool" (sysfs is another namespace's) or "sysfs+ethtool"."""
    out: dict[str, int | None] = {}
    sources = set()
    for index, name in socket.if_nameindex():
        if name == "lo":
            continue
        base = Path(sys_net) / name
        if _read_int(base / "ifindex") == index:
            speed = _read_int(base / "speed")
            out[name] = speed if speed is not None and speed > 0 else None
            sources.add("sysfs")
        else:
            out[name] = ethtool_speed(name)
            sources.add("ethtool")
    return out, "+".join(sorted(sources, reverse=True)) or "none"


def nvidia_topo_text(timeout: float = 20.0) -> str | None:
    """`nvidia-smi topo -m`, or None where nvidia-smi is missing or fails."""
    from gpuclust.errors import SlurmError
    from gpuclust.slurm.runner import run_command

    try:
        res = run_command(["nvidia-smi", "topo", "-m"], timeout=timeout, check=False)
    except SlurmError:
        return None
    return res.stdout if res.returncode == 0 and res.stdout.strip() else None


def nvlink_in_topo(text: str | None) -> bool | None:
    """True when the GPU matrix has an NV# cell, False when it has a matrix without one, None without text."""
    if not text:
        return None
    cells = [c for line in text.splitlines() if line.startswith("GPU") for c in line.split()[1:]]
    if not cells:
        return None
    return any(_NV_LINK.match(c) for c in cells)


def capture(torch: Any) -> dict[str, Any]:
    """What this node offers, recorded once per node (local rank 0)."""
    nics, source = nic_speeds()
    topo = nvidia_topo_text() if torch.cuda.is_available() or os.path.exists("/dev/nvidiactl") else None
    return {
        "cuda_devices": int(torch.cuda.device_count()) if torch.cuda.is_available() else 0,
        "nics": nics,
        "nic_speed_source": source,
        "nvidia_smi_topo": topo,
        "nvlink": nvlink_in_topo(topo),
    }


# ---- a MIG node's physical GPUs ----------------------------------------------------------------------


@dataclass(frozen=True)
class MigCards:
    """A MIG node's GPUs as physical cards: what its device files count, where Slurm's GRES counts instances."""

    gres: str                          # the node's configured Gres
    instances: int                     # the GPU GRES Slurm declares there (one per MIG instance, plus whole GPUs)
    gpu_equivalents: Fraction | None   # None: a slice of unknown share
    cards: int | None                  # physical GPUs; None: unknown
    cards_from: str                    # "nvidia_smi" (the job's health snapshot), "gpu_equivalents" or "unknown"
    snapshot: str | None = None        # the snapshot's phase, with cards_from nvidia_smi

    def basis(self) -> str:
        """`1 GPU-equivalent, so 1 physical GPU`, or `... on 1 physical GPU (nvidia-smi, the job's before snapshot)`."""
        eq = "unknown GPU-equivalents" if self.gpu_equivalents is None else \
            f"{format(float(self.gpu_equivalents), '.3g')} GPU-equivalent{'' if self.gpu_equivalents == 1 else 's'}"
        if self.cards is None:
            return f"{eq}: its physical GPUs unknown"
        cards = f"{self.cards} physical GPU{'' if self.cards == 1 else 's'}"
        if self.cards_from == "nvidia_smi":
            return f"{eq} on {cards} (nvidia-smi, the job's {self.snapshot} snapshot)"
        return f"{eq}, so {cards}"

    def as_dict(self) -> dict[str, Any]:
        return {"gres": self.gres, "gres_gpus": self.instances,
                "gpu_equivalents": None if self.gpu_equivalents is None else float(self.gpu_equivalents),
                "physical_gpus": self.cards, "physical_from": self.cards_from}


def snapshot_gpus(results_root: str | None, job_id: str) -> dict[str, tuple[int, str]]:
    """{node: (physical GPUs nvidia-smi listed, phase)} from the job's health snapshots (before, else after);
    nodes without a readable nvidia-smi entry are left out."""
    from gpuclust.accept.health.collect import PHASES, checked_source, load_snapshots
    from gpuclust.accept.health.job import HEALTH_DIR

    if not results_root:
        return {}
    directory = Path(results_root) / HEALTH_DIR / job_id
    if not directory.is_dir():
        return {}
    snapshots, _ = load_snapshots(directory)  # (its problems are health_findings' to report)
    out: dict[str, tuple[int, str]] = {}
    for node, phases in snapshots.items():
        for phase in PHASES:
            sources = (phases.get(phase) or {}).get("sources")
            entry = checked_source("nvidia_smi", sources.get("nvidia_smi") if isinstance(sources, dict) else None)
            gpus = entry.get("gpus")
            if entry.get("status") == "ok" and isinstance(gpus, list) and gpus:
                out[node] = (len(gpus), phase)
                break
    return out


def mig_cards(result: R.JobResult, results_root: str | None,
              shares: Mapping[str, Fraction] | None = None) -> dict[str, MigCards]:
    """{node: MigCards} for the job's nodes whose configured Gres has MIG slices (gpushare.node_layout, with the
    site's [gpu_type] gpu_share); {} when none has, without reading any snapshot."""
    from gpuclust.slurm.gpushare import node_layout

    layouts = {}
    for node in result.nodes:
        gres = result.job.node_gres.get(node)
        if gres:
            layout = node_layout(gres, shares)
            if layout.mig_mode:
                layouts[node] = (gres, layout)
    if not layouts:
        return {}
    smi = snapshot_gpus(results_root, result.job_id)
    out: dict[str, MigCards] = {}
    for node, (gres, layout) in layouts.items():
        instances = layout.gpu_devices
        if node in smi:
            count, phase = smi[node]
            out[node] = MigCards(gres, instances, layout.gpu_equivalents, count, "nvidia_smi", phase)
        else:
            cards = layout.physical_gpus
            out[node] = MigCards(gres, instances, layout.gpu_equivalents, cards,
                                 "gpu_equivalents" if cards is not None else "unknown")
    return out


# ---- announced vs seen (accept report) ----------------------------------------------------------------


def announced(part: PartitionConfig | None) -> dict[str, Any]:
    if part is None:
        return {}
    out = {"gpus_per_node": part.gpus_per_node, "nics_per_node": part.nics_per_node,
           "nic_speed_mbps": part.nic_speed_mbps, "nvlink": part.nvlink}
    return {k: v for k, v in out.items() if v is not None}


def seen_on(result: R.JobResult, node: str) -> dict[str, Any] | None:
    """The node's recorded topology (its first rank that recorded one) plus the rank's device files and the
    node's configured GRES count; None when the job recorded none (older results)."""
    from gpuclust.slurm.gres import gres_gpu_count

    for rank in sorted(result.ranks_on(node), key=lambda r: r.rank):
        topo = rank.extra.get("topology")
        if isinstance(topo, dict):
            out = dict(topo)
            out["device_files"] = rank.devices_found
            gres = result.job.node_gres.get(node)
            out["gres_gpus"] = gres_gpu_count(gres) if gres is not None else None
            return out
    return None


def counted_nics(nics: dict[str, Any], patterns: Sequence[str] | None) -> dict[str, Any]:
    if not patterns:
        return dict(nics)
    return {n: s for n, s in nics.items() if any(fnmatch.fnmatchcase(n, p) for p in patterns)}


def seen_gpus(seen: dict[str, Any]) -> tuple[int | None, str]:
    """The node's GPU count: device files when probed, else CUDA devices when any, else the GRES count."""
    for key in ("device_files", "cuda_devices", "gres_gpus"):
        value = seen.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and (value > 0 or key == "gres_gpus"):
            return value, key
    return None, "none"


def seen_cards(seen: dict[str, Any], cards: MigCards) -> tuple[int | None, str]:
    """A MIG node's physical GPUs as seen: device files when probed, else the count behind `cards`."""
    value = seen.get("device_files")
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value, "device_files"
    return cards.cards, cards.cards_from if cards.cards is not None else "none"


def announced_cards(announced: int, cards: MigCards) -> tuple[int | None, str]:
    """The physical GPUs a MIG node's announcement names, and how it was read: gpus_per_node equal to Slurm's GPU
    count there announces its MIG instances (their cards); any other number is read as cards."""
    if announced == cards.instances:
        return cards.cards, (f"partition's {announced} GPUs per node = Slurm's {cards.instances} MIG instances "
                             f"({cards.gres}), {cards.basis()}")
    return announced, f"read as physical GPUs; Slurm declares {cards.instances} MIG instances ({cards.gres})"


def compare(result: R.JobResult, part: PartitionConfig | None,
            mig: Mapping[str, MigCards] | None = None) -> tuple[dict[str, Any], list[Any]]:
    """({node: comparison}, findings) (gpuclust.findings.Finding, check "topology"). `mig`: the job's MIG nodes
    (mig_cards), whose GPUs are compared as physical cards."""

    want = announced(part)
    table: dict[str, Any] = {}
    findings: list[Finding] = []
    if not want:
        return table, findings

    def add(node: str, status: Nagios, message: str) -> None:
        findings.append(Finding.make("topology", status, message, [node], job_id=result.job_id, kind=result.kind))

    for node in result.nodes:
        seen = seen_on(result, node)
        if seen is None:
            table[node] = {"announced": want, "seen": None, "match": None, "mismatches": [],
                           "note": "the job recorded no topology (an older result)"}
            continue
        raw = seen.get("nics")
        nics: dict[str, Any] = raw if isinstance(raw, dict) else {}
        fabric = counted_nics(nics, part.nic_names if part else None)
        cards = (mig or {}).get(node)
        gpus, gpus_from = seen_gpus(seen) if cards is None else seen_cards(seen, cards)
        got = {"gpus_per_node": gpus, "gpus_from": gpus_from, "nics_per_node": len(fabric),
               "nic_speeds_mbps": fabric, "nic_speed_source": seen.get("nic_speed_source"),
               "nvlink": seen.get("nvlink"), "cuda_devices": seen.get("cuda_devices"),
               "device_files": seen.get("device_files"), "gres_gpus": seen.get("gres_gpus"),
               "nvidia_smi_topo": seen.get("nvidia_smi_topo")}
        bad: list[str] = []
        if cards is not None:
            got["mig"] = cards.as_dict()
            if "gpus_per_node" in want:
                expect, how = announced_cards(want["gpus_per_node"], cards)
                if expect is None or gpus is None:
                    add(node, Nagios.WARNING, f"topology on {node}: physical GPUs not compared ({gpus} seen "
                                              f"({gpus_from}); {how})")
                elif gpus != expect:
                    bad.append(f"{gpus} physical GPU{'' if gpus == 1 else 's'} seen ({gpus_from}), {expect} "
                               f"announced ({how})")
        elif "gpus_per_node" in want and gpus != want["gpus_per_node"]:
            bad.append(f"{gpus} GPUs seen ({gpus_from}), {want['gpus_per_node']} announced")
        if "nics_per_node" in want and len(fabric) != want["nics_per_node"]:
            bad.append(f"{len(fabric)} NICs seen ({', '.join(sorted(fabric)) or 'none'}), "
                       f"{want['nics_per_node']} announced")
        if "nic_speed_mbps" in want:
            slow = {n: s for n, s in fabric.items() if s is None or s < want["nic_speed_mbps"]}
            if slow:
                bad.append("NIC speed " + ", ".join(f"{n} {s if s is not None else 'unknown'} Mb/s"
                                                    for n, s in sorted(slow.items()))
                           + f", {want['nic_speed_mbps']} Mb/s announced")
        for text in bad:
            add(node, Nagios.CRITICAL, f"topology on {node}: {text}")
        if want.get("nvlink") is True and seen.get("nvlink") is None:
            add(node, Nagios.WARNING, f"NVLink announced for {node} but not verifiable there (no nvidia-smi topo -m)")
        elif "nvlink" in want and seen.get("nvlink") is not None and seen.get("nvlink") != want["nvlink"]:
            bad.append(f"NVLink {'present' if seen.get('nvlink') else 'absent'} (nvidia-smi topo -m), "
                       f"{'present' if want['nvlink'] else 'absent'} announced")
            add(node, Nagios.CRITICAL, f"topology on {node}: {bad[-1]}")
        table[node] = {"announced": want, "seen": got, "match": not bad, "mismatches": bad}
    return table, findings
