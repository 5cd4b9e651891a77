"""The GPUs' own counters (source `nvidia_smi`): `nvidia-smi -q -x`, bounded by [health] nvidia_smi_timeout.

    nvidia_smi  {"driver_version", "cuda_version", "gpus": [GpuHealth.as_dict()]}

Findings (after the run, against the before snapshot where a delta is needed):
  ecc       uncorrectable volatile ECC grew, or the aggregate exceeds ecc_uncorrectable_max: CRITICAL;
            correctable grew by more than ecc_correctable_max: WARNING
  remap     row remap pending/failed, or a page retirement pending: CRITICAL (needs a GPU reset / RMA)
  throttle  HW slowdown, HW thermal, HW power brake or SW thermal active after the run: WARNING
  pcie      link below max width, or below max generation while the GPU is busy: pcie_severity
  vanished  a GPU in the before snapshot and not in the after one (matched by UUID, else PCI bus id, else
            index), or nvidia-smi that answered before the run and not after it: CRITICAL
  nvlink    an NVLink error counter grew by more than [health] nvlink_error_max: CRITICAL for recovery and
            fatal counters, WARNING for the others (CRC, replay: the link repairs them)
  fabric    Fabric Manager's state for the GPU (R535+ <fabric>, NVSwitch systems) is not Completed, or its
            status not Success: CRITICAL (the GPU is not in the NVLink fabric; jobs fail at NCCL init).
            "N/A" (no NVSwitch fabric) is no finding.
  mig       a MIG mode change is pending (current_mig differs from pending_mig: the GPU runs in its current mode
            until it is reset, so Slurm's GRES and the GPU disagree after the next reset): WARNING

MIG: a GPU in MIG mode lists its MIG devices (<mig_devices>): GPU instance id, compute instance id, the shared
engine counts (multiprocessor_count is the instance's SMs), its memory, and its own ECC counts
(<ecc_error_count>, volatile SRAM uncorrectable on R470+). An instance's ECC is judged as a GPU's (ecc above),
the instance matched by (GPU instance id, compute instance id) between the two snapshots. Under MIG the GPU's own
volatile ECC reads N/A; its aggregate counts remain. nvidia-smi does not name an instance's profile: its memory
in GB (memory_gb, MiB / 1024 rounded up, 19968 MiB -> 20) is the `<M>gb` of the profile name.

PCIe generation: GPUs drop their link to gen1 when idle to save power, so an idle snapshot says nothing about
the gen the slot trains to. The generation is judged only when the GPU is not idle (its gpu_idle clock event
reason is "Not Active"); max is the lower of device and host max where the driver reports both (R535+), so
a gen4 GPU in a gen3 host is not a finding. The width is judged always: it does not drop at idle.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from gpuclust.accept.health.kit import (
    HealthParseError,
    HealthPaths,
    Judge,
    Snap,
    Source,
    checkable,
    guard,
    is_unknown,
    num,
    ok,
    run,
    source_data,
    to_float,
    to_int,
    to_yes_no,
)
from gpuclust.accept.health.shape import boolean, integer, list_of, map_of, number, obj, string
from gpuclust.exitcodes import Nagios

try:  # defusedxml when the site has it; otherwise the stdlib parser behind the DTD/entity refusal below
    from defusedxml.ElementTree import fromstring as _xml_fromstring  # type: ignore[import-not-found,unused-ignore]
except ImportError:  # pragma: no cover - depends on the environment
    _xml_fromstring = ET.fromstring


NVIDIA_SMI = "nvidia-smi -q -x"

# The ECC count keys across driver generations. Older drivers (<= R470 on pre-Ampere parts): single_bit/
# double_bit with a <total>; R510+: sram_/dram_ correctable/uncorrectable; R550+ splits the SRAM
# uncorrectable count into parity and SEC-DED.
_CORRECTABLE_KEYS = ("sram_correctable", "dram_correctable")
_UNCORRECTABLE_KEYS = ("sram_uncorrectable", "sram_uncorrectable_parity", "sram_uncorrectable_secded",
                       "dram_uncorrectable")

# Clock event (throttle) reasons, named without the clocks_event_reason_/clocks_throttle_reason_ prefix.
_REASON_PREFIXES = ("clocks_event_reason_", "clocks_throttle_reason_")


@dataclass(frozen=True)
class EccCounts:
    """ECC error counts of a GPU or MIG device: correctable and uncorrectable sums, and the driver's own keys."""

    correctable: int | None  # sum of the known correctable counts; None when none is known
    uncorrectable: int | None
    raw: dict[str, int | None] = field(default_factory=dict)  # the driver's own keys, as reported


@dataclass(frozen=True)
class PcieLink:
    """A GPU's PCIe link: its generation and width, current and max."""

    gen_current: int | None
    gen_max: int | None  # the lower of the device's and the host's max when both are reported
    gen_max_device: int | None
    gen_max_host: int | None
    width_current: int | None
    width_max: int | None


@dataclass(frozen=True)
class MigDevice:
    """One MIG device (a compute instance in a GPU instance) as `nvidia-smi -q -x` lists it."""

    index: int | None
    gpu_instance_id: int | None
    compute_instance_id: int | None
    multiprocessor_count: int | None  # the instance's SMs
    shared: dict[str, int | None]  # the <device_attributes><shared> engine counts, by nvidia-smi's names
    memory_total_mib: int | None
    ecc_volatile: EccCounts
    ecc_aggregate: EccCounts

    @property
    def memory_gb(self) -> int | None:
        """The `<M>gb` of the instance's profile name: its memory in GiB rounded up (19968 MiB -> 20)."""
        return None if self.memory_total_mib is None else -(-self.memory_total_mib // 1024)

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "memory_gb": self.memory_gb}


@dataclass(frozen=True)
class GpuHealth:
    """One GPU of `nvidia-smi -q -x`: ECC, retired pages, row remaps, clocks, PCIe, power, NVLink, fabric, MIG."""

    index: int  # order in the document (nvidia-smi's GPU index)
    pci_bus_id: str | None
    product_name: str | None
    uuid: str | None
    ecc_volatile: EccCounts
    ecc_aggregate: EccCounts
    retired_single_bit: int | None
    retired_double_bit: int | None
    retired_pending: bool | None
    remapped_correctable: int | None
    remapped_uncorrectable: int | None
    remapped_pending: bool | None
    remapped_failure: bool | None
    remap_histogram: dict[str, int | None]
    clock_events: dict[str, bool | None]  # reason -> active
    pcie: PcieLink
    power_draw_w: float | None
    temperature_c: float | None
    nvlink: dict[str, int | None]  # error counters where the document has them (absent on most drivers)
    fabric_state: str | None = None  # Fabric Manager: Not Started, In Progress, Completed (None: N/A)
    fabric_status: str | None = None  # Success, or the failure's name
    mig_mode_current: str | None = None  # Enabled, Disabled (None: N/A, no MIG on this GPU)
    mig_mode_pending: str | None = None
    mig_devices: tuple[MigDevice, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["mig_devices"] = [m.as_dict() for m in self.mig_devices]
        return out


@dataclass(frozen=True)
class NvidiaSmiLog:
    """One `nvidia-smi -q -x` document: the driver and CUDA versions, and each GPU's health."""

    driver_version: str | None
    cuda_version: str | None
    gpus: tuple[GpuHealth, ...]

    def as_dict(self) -> dict[str, Any]:
        return {"driver_version": self.driver_version, "cuda_version": self.cuda_version,
                "gpus": [g.as_dict() for g in self.gpus]}


# The snapshot's data (SOURCE.shape): NvidiaSmiLog.as_dict().
_ECC_SHAPE = obj({"correctable": integer(True), "uncorrectable": integer(True), "raw": map_of(integer(True))})
GPU_SHAPE = obj({
    "index": integer(), "pci_bus_id": string(True), "product_name": string(True), "uuid": string(True),
    "ecc_volatile": _ECC_SHAPE, "ecc_aggregate": _ECC_SHAPE,
    "retired_single_bit": integer(True), "retired_double_bit": integer(True), "retired_pending": boolean(True),
    "remapped_correctable": integer(True), "remapped_uncorrectable": integer(True),
    "remapped_pending": boolean(True), "remapped_failure": boolean(True),
    "remap_histogram": map_of(integer(True)), "clock_events": map_of(boolean(True)),
    "pcie": obj({k: integer(True) for k in ("gen_current", "gen_max", "gen_max_device", "gen_max_host",
                                             "width_current", "width_max")}),
    "power_draw_w": number(True), "temperature_c": number(True), "nvlink": map_of(integer(True)),
    "fabric_state": string(True), "fabric_status": string(True),
    "mig_mode_current": string(True), "mig_mode_pending": string(True),
    "mig_devices": list_of(obj({
        "index": integer(True), "gpu_instance_id": integer(True), "compute_instance_id": integer(True),
        "multiprocessor_count": integer(True), "shared": map_of(integer(True)), "memory_total_mib": integer(True),
        "memory_gb": integer(True), "ecc_volatile": _ECC_SHAPE, "ecc_aggregate": _ECC_SHAPE})),
}, required=["index"])
SHAPE = obj({"driver_version": string(True), "cuda_version": string(True), "gpus": list_of(GPU_SHAPE)},
            required=["gpus"])


def _refuse_dtd(text: str, source: str) -> None:
    """nvidia-smi writes `<!DOCTYPE nvidia_smi_log SYSTEM "nvsmi_device_vNN.dtd">`: a DOCTYPE with a SYSTEM id
    and no internal subset. Anything more (an internal subset, an entity declaration) is refused before the
    parser sees it: entity expansion is how XML bombs work, and nvidia-smi never writes one."""
    if re.search(r"<!ENTITY", text, re.IGNORECASE):
        raise HealthParseError(source, "the document declares an entity (<!ENTITY); refused")
    if re.search(r"<!DOCTYPE\b[^>]*\[", text, re.IGNORECASE):
        raise HealthParseError(source, "the DOCTYPE has an internal subset; refused")


def _text(el: ET.Element | None, path: str) -> str | None:
    if el is None:
        return None
    found = el.find(path)
    if found is None or found.text is None:
        return None
    value = found.text.strip()
    return None if is_unknown(value) else value


def _ecc(section: ET.Element | None) -> EccCounts:
    if section is None:
        return EccCounts(None, None, {})
    raw: dict[str, int | None] = {}
    for child in section:
        if len(child):  # older layout: <single_bit><device_memory/>...<total/></single_bit>
            for sub in child:
                raw[f"{child.tag}/{sub.tag}"] = to_int(sub.text)
        else:
            raw[child.tag] = to_int(child.text)

    def total(keys: Iterable[str]) -> int | None:
        known = [raw[k] for k in keys if raw.get(k) is not None]
        return sum(v for v in known if v is not None) if known else None

    correctable = total(_CORRECTABLE_KEYS)
    uncorrectable = total(_UNCORRECTABLE_KEYS)
    if correctable is None:
        correctable = raw.get("single_bit/total")
    if uncorrectable is None:
        uncorrectable = raw.get("double_bit/total")
    return EccCounts(correctable, uncorrectable, raw)


def _mig_devices(el: ET.Element) -> tuple[MigDevice, ...]:
    """<mig_devices> (the text "None" when MIG is on and no instance exists, absent or N/A without MIG)."""
    out = []
    for dev in el.findall("mig_devices/mig_device"):
        shared_el = dev.find("device_attributes/shared")
        shared = {c.tag: to_int(c.text) for c in shared_el} if shared_el is not None else {}
        counts = dev.find("ecc_error_count")
        out.append(MigDevice(
            index=to_int(_text(dev, "index")),
            gpu_instance_id=to_int(_text(dev, "gpu_instance_id")),
            compute_instance_id=to_int(_text(dev, "compute_instance_id")),
            multiprocessor_count=shared.get("multiprocessor_count"),
            shared=shared,
            memory_total_mib=to_int(_text(dev, "fb_memory_usage/total")),  # "19968 MiB"
            ecc_volatile=_ecc(counts.find("volatile_count") if counts is not None else None),
            ecc_aggregate=_ecc(counts.find("aggregate_count") if counts is not None else None),
        ))
    return tuple(out)


def _width(text: str | None) -> int | None:
    return to_int(text.rstrip("xX") if text else text)


def _gpu(el: ET.Element, index: int) -> GpuHealth:
    ecc = el.find("ecc_errors")
    retired = el.find("retired_pages")
    remap = el.find("remapped_rows")
    events = el.find("clocks_event_reasons")
    if events is None:
        events = el.find("clocks_throttle_reasons")
    clock_events: dict[str, bool | None] = {}
    if events is not None:
        for child in events:
            name = child.tag
            for prefix in _REASON_PREFIXES:
                name = name.removeprefix(prefix)
            text = (child.text or "").strip().lower()
            clock_events[name] = True if text == "active" else False if text == "not active" else None
    link = el.find("pci/pci_gpu_link_info")
    max_dev = to_int(_text(link, "pcie_gen/max_device_link_gen"))
    max_host = to_int(_text(link, "pcie_gen/max_host_link_gen"))
    gen_max = min(max_dev, max_host) if max_dev is not None and max_host is not None else \
        to_int(_text(link, "pcie_gen/max_link_gen"))
    histogram: dict[str, int | None] = {}
    hist = remap.find("row_remapper_histogram") if remap is not None else None
    if hist is not None:
        histogram = {c.tag.removeprefix("row_remapper_histogram_"): to_int(c.text) for c in hist}
    power = _text(el, "power_readings/power_draw") or _text(el, "gpu_power_readings/power_draw")
    nvlink: dict[str, int | None] = {}
    for link_el in el.findall("nvlink") + el.findall("nvlinks/nvlink"):
        lid = _text(link_el, "link") or str(len(nvlink))
        for child in link_el:
            if child.tag.endswith(("_errors", "_error", "_counter")):
                nvlink[f"{lid}/{child.tag}"] = to_int(child.text)
    return GpuHealth(
        index=index,
        pci_bus_id=_text(el, "pci/pci_bus_id") or el.get("id"),
        product_name=_text(el, "product_name"),
        uuid=_text(el, "uuid"),
        ecc_volatile=_ecc(ecc.find("volatile") if ecc is not None else None),
        ecc_aggregate=_ecc(ecc.find("aggregate") if ecc is not None else None),
        retired_single_bit=to_int(_text(retired, "multiple_single_bit_retirement/retired_count")),
        retired_double_bit=to_int(_text(retired, "double_bit_retirement/retired_count")),
        retired_pending=to_yes_no(_text(retired, "pending_retirement")),
        remapped_correctable=to_int(_text(remap, "remapped_row_corr")),
        remapped_uncorrectable=to_int(_text(remap, "remapped_row_unc")),
        remapped_pending=to_yes_no(_text(remap, "remapped_row_pending")),
        remapped_failure=to_yes_no(_text(remap, "remapped_row_failure")),
        remap_histogram=histogram,
        clock_events=clock_events,
        pcie=PcieLink(
            gen_current=to_int(_text(link, "pcie_gen/current_link_gen")),
            gen_max=gen_max,
            gen_max_device=max_dev,
            gen_max_host=max_host,
            width_current=_width(_text(link, "link_widths/current_link_width")),
            width_max=_width(_text(link, "link_widths/max_link_width")),
        ),
        power_draw_w=to_float(power),
        temperature_c=to_float(_text(el, "temperature/gpu_temp")),
        nvlink=nvlink,
        fabric_state=_text(el, "fabric/state"),
        fabric_status=_text(el, "fabric/status"),
        mig_mode_current=_text(el, "mig_mode/current_mig"),
        mig_mode_pending=_text(el, "mig_mode/pending_mig"),
        mig_devices=_mig_devices(el),
    )


def parse_nvidia_smi_xml(text: str, source: str = NVIDIA_SMI) -> NvidiaSmiLog:
    """`nvidia-smi -q -x` -> per-GPU health counters (see GpuHealth)."""
    _refuse_dtd(text, source)
    try:
        root = _xml_fromstring(text)
    except ET.ParseError as exc:
        line, col = exc.position
        raise HealthParseError(source, f"line {line} column {col}: not well-formed XML ({exc.msg if hasattr(exc, 'msg') else exc})") from None
    except Exception as exc:  # defusedxml's refusals (DTDForbidden, EntitiesForbidden ...)
        raise HealthParseError(source, f"refused: {exc}") from None
    if root.tag != "nvidia_smi_log":
        raise HealthParseError(source, f"root element <{root.tag}> is not <nvidia_smi_log>")
    gpus = tuple(_gpu(el, i) for i, el in enumerate(root.findall("gpu")))
    return NvidiaSmiLog(_text(root, "driver_version"), _text(root, "cuda_version"), gpus)


def collect_nvidia_smi(paths: HealthPaths, timeout: float) -> dict[str, Any]:
    def read() -> dict[str, Any]:
        out = run([paths.nvidia_smi, "-q", "-x"], timeout)
        return ok(**parse_nvidia_smi_xml(out).as_dict())

    return guard(read)


# Clock event reasons that mean the hardware held the clocks down (not the idle or application settings).
THROTTLE_REASONS = ("hw_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown", "sw_thermal_slowdown")


def _gpu_name(g: Mapping[str, Any]) -> str:
    ids = ", ".join(str(x) for x in (g.get("pci_bus_id"), g.get("uuid")) if x)
    return f"GPU {g.get('index')}" + (f" ({ids})" if ids else "")


def _same_gpu(b: Mapping[str, Any], a: Mapping[str, Any]) -> bool:
    if b.get("uuid") and a.get("uuid"):
        return bool(b["uuid"] == a["uuid"])
    if b.get("pci_bus_id") and a.get("pci_bus_id"):
        return str(b["pci_bus_id"]).lower() == str(a["pci_bus_id"]).lower()
    return bool(b.get("index") == a.get("index"))


def _vanished(j: Judge, before: Snap, after: Snap) -> None:
    """GPUs (or nvidia-smi itself) present before the run and gone after: the fault acceptance exists for (a
    GPU that fell off the bus, Xid 79; a driver that lost it; nvidia-smi hung on it)."""
    b = source_data(before, "nvidia_smi")
    if b is None or not checkable(after, "nvidia_smi"):
        return
    a = source_data(after, "nvidia_smi")
    listed = list(b.get("gpus", []))
    if a is None:
        entry = (after or {}).get("sources", {}).get("nvidia_smi")
        reason = entry.get("reason", "unavailable") if isinstance(entry, Mapping) else "not collected"
        gpus = "; ".join(_gpu_name(g) for g in listed) or "no GPU"
        j.add("vanished", Nagios.CRITICAL, "nvidia-smi", f"{j.node}: nvidia-smi answered before the run and not "
              f"after it ({reason}); before it listed {gpus}", reason=reason,
              gpus=[{"index": g.get("index"), "pci": g.get("pci_bus_id"), "uuid": g.get("uuid")} for g in listed])
        return
    now = a.get("gpus", [])
    for g in listed:
        if any(_same_gpu(g, other) for other in now):
            continue
        j.add("vanished", Nagios.CRITICAL, f"gpu{g.get('index')}-{g.get('pci_bus_id') or g.get('uuid') or ''}",
              f"{j.node}: {_gpu_name(g)} present before the run, gone after it (fell off the bus or lost to "
              f"the driver; nvidia-smi lists {len(now)} of {len(listed)} GPUs)", gpu=g.get("index"),
              pci=g.get("pci_bus_id"), uuid=g.get("uuid"))


def judge_nvidia_smi(j: Judge, before: Snap, after: Snap) -> None:
    _vanished(j, before, after)
    src = source_data(after, "nvidia_smi")
    if src is None:
        return
    prior = {g.get("pci_bus_id") or g.get("index"): g for g in (source_data(before, "nvidia_smi") or {}).get("gpus", [])}
    for g in src.get("gpus", []):
        gid = g.get("pci_bus_id") or g.get("index")
        b = prior.get(gid)
        name = f"GPU {g.get('index')} ({g.get('pci_bus_id')})"
        _judge_ecc(j, name, b, g)
        _judge_remap(j, name, g)
        _judge_throttle(j, name, g)
        _judge_pcie(j, name, g)
        _judge_nvlink(j, name, b, g)
        _judge_fabric(j, name, g)
        _judge_mig(j, name, b, g)


def _judge_ecc(j: Judge, name: str, b: Mapping[str, Any] | None, g: Mapping[str, Any], *,
               tag: str | None = None, prefix: str = "", where: Mapping[str, Any] | None = None) -> None:
    """A GPU's ECC counts (g: the GPU's data), or a MIG instance's, judged the same way (g: the instance's data;
    `tag` names its counters, `prefix` starts its detail, `where` is its evidence)."""
    tag = tag or f"gpu{g.get('index')}"
    place = dict(where) if where is not None else {"gpu": g.get("index"), "pci": g.get("pci_bus_id")}
    vol_a, agg_a = g.get("ecc_volatile") or {}, g.get("ecc_aggregate") or {}
    vol_b = (b or {}).get("ecc_volatile") or {}
    unc = j.delta(f"{name} volatile uncorrectable ECC", f"{tag}-ecc-uncorrectable",
                  vol_b.get("uncorrectable"), vol_a.get("uncorrectable")) if b else None
    if unc:
        j.add("ecc", Nagios.CRITICAL, f"{prefix}uncorrectable", f"{j.node}: {name} uncorrectable volatile ECC "
              f"errors {vol_b.get('uncorrectable')} -> {vol_a.get('uncorrectable')} during the run",
              **place, before=vol_b.get("uncorrectable"), after=vol_a.get("uncorrectable"))
    agg = num(agg_a.get("uncorrectable"))
    if agg is not None and agg > j.cfg.ecc_uncorrectable_max:
        j.add("ecc", Nagios.CRITICAL, f"{prefix}uncorrectable-aggregate", f"{j.node}: {name} aggregate "
              f"uncorrectable ECC errors {agg} > {j.cfg.ecc_uncorrectable_max}", **place, aggregate=agg)
    cor = j.delta(f"{name} volatile correctable ECC", f"{tag}-ecc-correctable",
                  vol_b.get("correctable"), vol_a.get("correctable")) if b else None
    if cor is not None and cor > j.cfg.ecc_correctable_max:
        j.add("ecc", Nagios.WARNING, f"{prefix}correctable", f"{j.node}: {name} correctable volatile ECC errors "
              f"{vol_b.get('correctable')} -> {vol_a.get('correctable')} (+{cor} > "
              f"{j.cfg.ecc_correctable_max})", **place, delta=cor)


def _judge_remap(j: Judge, name: str, g: Mapping[str, Any]) -> None:
    for key, detail, what in (("remapped_pending", "pending", "row remap pending (GPU reset needed)"),
                              ("remapped_failure", "failure", "row remap failed (RMA)"),
                              ("retired_pending", "retirement-pending", "page retirement pending")):
        if g.get(key) is True:
            j.add("remap", Nagios.CRITICAL, detail, f"{j.node}: {name} {what}", gpu=g.get("index"),
                  pci=g.get("pci_bus_id"), field=key)


def _judge_throttle(j: Judge, name: str, g: Mapping[str, Any]) -> None:
    events = g.get("clock_events") or {}
    for reason in THROTTLE_REASONS:
        if events.get(reason) is True:
            j.add("throttle", Nagios.WARNING, reason, f"{j.node}: {name} clocks held down: {reason} "
                  "active after the run", gpu=g.get("index"), pci=g.get("pci_bus_id"), reason=reason)


def _judge_pcie(j: Judge, name: str, g: Mapping[str, Any]) -> None:
    link = g.get("pcie") or {}
    gen, gen_max = num(link.get("gen_current")), num(link.get("gen_max"))
    width, width_max = num(link.get("width_current")), num(link.get("width_max"))
    busy = (g.get("clock_events") or {}).get("gpu_idle") is False
    low_width = width is not None and width_max is not None and width < width_max
    low_gen = busy and gen is not None and gen_max is not None and gen < gen_max
    if low_width or low_gen:
        sev = Nagios.CRITICAL if j.cfg.pcie_severity == "critical" else Nagios.WARNING
        j.add("pcie", sev, f"gen{gen}-x{width}", f"{j.node}: {name} PCIe link gen{gen} x{width}, max "
              f"gen{gen_max} x{width_max}", gpu=g.get("index"), pci=g.get("pci_bus_id"), gen=gen,
              gen_max=gen_max, width=width, width_max=width_max, gen_judged=busy)


# NVLink counters whose growth means the link lost data or retrained (the rest, CRC and replay, it repairs).
_NVLINK_SEVERE = ("recovery", "fatal", "uncorrectable", "ecc")


def _judge_nvlink(j: Judge, name: str, b: Mapping[str, Any] | None, g: Mapping[str, Any]) -> None:
    """NVLink error counters that grew between the two snapshots (parsed on drivers that print them)."""
    if not b:
        return
    before, after = b.get("nvlink") or {}, g.get("nvlink") or {}
    for key in sorted(after):
        grew = j.delta(f"{name} NVLink {key}", f"gpu{g.get('index')}-nvlink-{key}", before.get(key), after.get(key))
        if grew is None or grew <= j.cfg.nvlink_error_max:
            continue
        severe = any(word in key.lower() for word in _NVLINK_SEVERE)
        j.add("nvlink", Nagios.CRITICAL if severe else Nagios.WARNING, f"gpu{g.get('index')}-{key}",
              f"{j.node}: {name} NVLink {key} {before.get(key)} -> {after.get(key)} (+{grew})", gpu=g.get("index"),
              pci=g.get("pci_bus_id"), counter=key, before=before.get(key), after=after.get(key))


def _judge_fabric(j: Judge, name: str, g: Mapping[str, Any]) -> None:
    state, status = g.get("fabric_state"), g.get("fabric_status")
    if state is None and status is None:
        return
    if str(state).lower() == "completed" and (status is None or str(status).lower() == "success"):
        return
    j.add("fabric", Nagios.CRITICAL, f"gpu{g.get('index')}-{state}-{status}", f"{j.node}: {name} Fabric Manager "
          f"state {state}, status {status} (expected Completed, Success): not in the NVLink fabric",
          gpu=g.get("index"), pci=g.get("pci_bus_id"), state=state, status=status)


def _instance_key(m: Mapping[str, Any]) -> tuple[Any, Any]:
    return m.get("gpu_instance_id"), m.get("compute_instance_id")


def _judge_mig(j: Judge, name: str, b: Mapping[str, Any] | None, g: Mapping[str, Any]) -> None:
    """A pending MIG mode change, and each MIG instance's ECC (as a GPU's; the instance matched between the two
    snapshots by its GPU and compute instance ids)."""
    current, pending = g.get("mig_mode_current"), g.get("mig_mode_pending")
    if isinstance(current, str) and isinstance(pending, str) and current.lower() != pending.lower():
        j.add("mig", Nagios.WARNING, f"gpu{g.get('index')}-pending-{pending}", f"{j.node}: {name} MIG mode "
              f"{current}, {pending} pending: the change takes effect at the GPU's next reset, and the node's GRES "
              "then no longer matches the GPU", gpu=g.get("index"), pci=g.get("pci_bus_id"), current=current,
              pending=pending)
    prior = {_instance_key(m): m for m in (b or {}).get("mig_devices") or [] if isinstance(m, Mapping)}
    for m in g.get("mig_devices") or []:
        if not isinstance(m, Mapping):
            continue
        gi, ci = _instance_key(m)
        _judge_ecc(j, f"{name} MIG instance GI {gi} CI {ci}", prior.get((gi, ci)) if b else None, m,
                   tag=f"gpu{g.get('index')}-gi{gi}-ci{ci}", prefix=f"gi{gi}-ci{ci}-",
                   where={"gpu": g.get("index"), "pci": g.get("pci_bus_id"), "gpu_instance": gi,
                          "compute_instance": ci})


def visible_devices(data: Mapping[str, Any]) -> int:
    """The GPU devices a node offers jobs, as its GRES counts them: each MIG device of a GPU in MIG mode (none
    on a MIG GPU without instances), and every other GPU once."""
    total = 0
    for g in data.get("gpus") or []:
        mig = str(g.get("mig_mode_current") or "").lower() == "enabled"
        total += len(g.get("mig_devices") or []) if mig else 1
    return total


SOURCE = Source("nvidia_smi", lambda r: collect_nvidia_smi(r.paths, r.nvidia_smi_timeout),
                judge_nvidia_smi, shape=SHAPE)
