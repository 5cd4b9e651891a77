"""Parsers for the hardware-health sources an acceptance run snapshots before and after it runs.

Pure functions: text (or a mapping of sysfs file texts) in, typed frozen dataclasses out. Every value a
source reports as unknown ("N/A", "Not Supported", "[N/A]", "Unknown Error", "N/A (no PMA)", absent) becomes
None, never 0: a counter nobody can read is not a counter that reads zero. Input that is not what the source
writes (truncated XML, a foreign document, a header/value line pair that does not match) raises
HealthParseError naming the source and the line or element.

Each dataclass has `as_dict()`, the JSON form the collector stores in a snapshot and the rules read back.
The shapes were checked against recorded output from real machines (tests/data/accept/health/SOURCES.md).
"""

from __future__ import annotations

import json
import math
import os
import re
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from gpuclust.errors import GpuclustError

try:  # defusedxml when the site has it; otherwise the stdlib parser behind the DTD/entity refusal below
    from defusedxml.ElementTree import fromstring as _xml_fromstring  # type: ignore[import-not-found,unused-ignore]
except ImportError:  # pragma: no cover - depends on the environment
    _xml_fromstring = ET.fromstring


class HealthParseError(GpuclustError):
    """A health source's output is not what that source writes. `source` names the source (or the file),
    `detail` the line or element and what was wrong."""

    def __init__(self, source: str, detail: str):
        self.source = source
        self.detail = detail
        super().__init__(f"{source}: {detail}")


# Values the drivers and sysfs write for "no value". Compared case-insensitively after strip().
_UNKNOWN = {"", "n/a", "[n/a]", "not supported", "[not supported]", "unknown error", "[unknown error]",
            "n/a (no pma)", "unknown", "<<<not_supported>>>", "[insufficient permissions]"}


def _is_unknown(text: str | None) -> bool:
    return text is None or text.strip().lower() in _UNKNOWN


def to_int(text: str | None) -> int | None:
    """'12', '12 us', '192 bank(s)' -> int; unknown markers -> None."""
    if _is_unknown(text):
        return None
    assert text is not None
    m = re.match(r"\s*(-?\d+)\b", text)
    return int(m.group(1)) if m else None


def to_float(text: str | None) -> float | None:
    """'67.03 W', '27 C' -> float; unknown markers -> None."""
    if _is_unknown(text):
        return None
    assert text is not None
    m = re.match(r"\s*(-?\d+(?:\.\d+)?)", text)
    return float(m.group(1)) if m else None


def to_yes_no(text: str | None) -> bool | None:
    if _is_unknown(text):
        return None
    assert text is not None
    low = text.strip().lower()
    if low in ("yes", "true", "1"):
        return True
    if low in ("no", "false", "0"):
        return False
    return None


# --------------------------------------------------------------------------------------------------
# nvidia-smi -q -x
# --------------------------------------------------------------------------------------------------

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
    correctable: int | None  # sum of the known correctable counts; None when none is known
    uncorrectable: int | None
    raw: dict[str, int | None] = field(default_factory=dict)  # the driver's own keys, as reported


@dataclass(frozen=True)
class PcieLink:
    gen_current: int | None
    gen_max: int | None  # the lower of the device's and the host's max when both are reported
    gen_max_device: int | None
    gen_max_host: int | None
    width_current: int | None
    width_max: int | None


@dataclass(frozen=True)
class GpuHealth:
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

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class NvidiaSmiLog:
    driver_version: str | None
    cuda_version: str | None
    gpus: tuple[GpuHealth, ...]

    def as_dict(self) -> dict[str, Any]:
        return {"driver_version": self.driver_version, "cuda_version": self.cuda_version,
                "gpus": [g.as_dict() for g in self.gpus]}


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
    return None if _is_unknown(value) else value


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


# --------------------------------------------------------------------------------------------------
# Kernel log Xid lines
# --------------------------------------------------------------------------------------------------

XID_SOURCE = "kernel log"

_XID = re.compile(r"NVRM: Xid \((?:PCI:)?(?P<pci>[0-9A-Fa-f:.]+)\): (?P<code>\d+),?\s*(?P<msg>.*)$")
# journalctl -o short-iso: 2024-05-01T12:00:01+0000 host kernel: ...; dmesg --time-format=iso:
# 2025-05-27T04:18:56,089671+00:00 ...
_ISO = re.compile(r"(?P<ts>\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?)")
# dmesg -T / --ctime: [Fri Aug 30 11:43:09 2024]
_CTIME = re.compile(r"\[(?:[A-Z][a-z]{2}) (?P<mon>[A-Z][a-z]{2}) +(?P<day>\d+) (?P<hms>\d\d:\d\d:\d\d) (?P<year>\d{4})\]")
# syslog / journalctl short: May 01 12:00:01 host kernel: ...
_SHORT = re.compile(r"^\s*(?P<mon>[A-Z][a-z]{2}) +(?P<day>\d+) (?P<hms>\d\d:\d\d:\d\d) ")
_MONTHS = {m: i for i, m in enumerate(("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct",
                                        "Nov", "Dec"), start=1)}


@dataclass(frozen=True)
class XidEvent:
    time: str | None  # ISO 8601; None when the line carries no wall-clock time (plain dmesg, a foreign month)
    pci: str  # as the driver prints it, e.g. 0000:3b:00
    code: int
    message: str
    line: str  # the line as read (stripped), to tell repeated untimed lines apart

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _line_time(line: str, year_hint: int | None) -> str | None:
    m = _ISO.search(line.split("NVRM:", 1)[0])
    if m:
        raw = m.group("ts").replace(",", ".")
        raw = re.sub(r"([+-]\d\d)(\d\d)$", r"\1:\2", raw)
        try:
            return datetime.fromisoformat(raw.replace("Z", "+00:00")).isoformat()
        except ValueError:
            return None
    m = _CTIME.search(line)
    if m and m.group("mon") in _MONTHS:
        return _local_iso(int(m.group("year")), _MONTHS[m.group("mon")], int(m.group("day")), m.group("hms"))
    m = _SHORT.match(line)
    if m and year_hint is not None and m.group("mon") in _MONTHS:
        return _local_iso(year_hint, _MONTHS[m.group("mon")], int(m.group("day")), m.group("hms"))
    return None


def _local_iso(year: int, month: int, day: int, hms: str) -> str | None:
    """dmesg -T and syslog print local time without a zone: read it as this machine's local time."""
    h, mi, s = (int(x) for x in hms.split(":"))
    try:
        return datetime(year, month, day, h, mi, s).astimezone().isoformat()
    except ValueError:
        return None


def parse_xid_lines(text: str, year_hint: int | None = None) -> list[XidEvent]:
    """Xid events from kernel log lines (journalctl -k -o short-iso, dmesg, dmesg -T, dmesg
    --time-format=iso, syslog). Lines that are not Xid reports are ignored. `year_hint`: the year for
    syslog-style lines that print none (Mon DD HH:MM:SS)."""
    events: list[XidEvent] = []
    for raw in text.splitlines():
        m = _XID.search(raw)
        if not m:
            continue
        events.append(XidEvent(_line_time(raw, year_hint), m.group("pci").lower(), int(m.group("code")),
                               m.group("msg").strip(), raw.strip()))
    return events


def parse_iso_time(text: str) -> datetime:
    """An ISO 8601 time (a 'Z' suffix accepted); naive times are read as UTC. Raises ValueError."""
    value = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    return value if value.tzinfo else value.replace(tzinfo=timezone.utc)


# --------------------------------------------------------------------------------------------------
# /sys/class/net/*/statistics
# --------------------------------------------------------------------------------------------------

NET_COUNTERS_ERRORS = ("rx_errors", "tx_errors", "rx_crc_errors", "rx_frame_errors", "rx_fifo_errors",
                       "rx_missed_errors", "rx_over_errors", "rx_length_errors", "tx_carrier_errors",
                       "tx_aborted_errors", "tx_fifo_errors", "tx_heartbeat_errors", "tx_window_errors")
NET_COUNTERS_DROPS = ("rx_dropped", "tx_dropped")


def parse_net_statistics(tree: Mapping[str, Mapping[str, str]]) -> dict[str, dict[str, int | None]]:
    """{iface: {counter: file text}} -> {iface: {counter: int or None}}; `lo` is skipped (its counters say
    nothing about the fabric)."""
    out: dict[str, dict[str, int | None]] = {}
    for iface in sorted(tree):
        if iface == "lo":
            continue
        out[iface] = {name: to_int(text) for name, text in sorted(tree[iface].items())}
    return out


def read_net_statistics(sysfs: str | os.PathLike[str]) -> dict[str, dict[str, int | None]]:
    """Read <sysfs>/class/net/*/statistics/*. Raises FileNotFoundError when <sysfs>/class/net is absent."""
    base = Path(sysfs) / "class" / "net"
    if not base.is_dir():
        raise FileNotFoundError(str(base))
    tree: dict[str, dict[str, str]] = {}
    for iface in sorted(p for p in base.iterdir() if (p / "statistics").is_dir()):
        tree[iface.name] = {f.name: _read(f) for f in sorted((iface / "statistics").iterdir()) if f.is_file()}
    return parse_net_statistics(tree)


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace").strip()
    except OSError:  # some sysfs files refuse reads (permissions, a driver without the attribute)
        return ""


# --------------------------------------------------------------------------------------------------
# /proc/net/snmp and /proc/net/netstat
# --------------------------------------------------------------------------------------------------


def parse_proc_net_snmp(text: str, source: str = "/proc/net/snmp") -> dict[str, dict[str, int]]:
    """The header/value line pairs of /proc/net/snmp (and /proc/net/netstat, the same format) ->
    {section: {field: value}}, e.g. out["Tcp"]["RetransSegs"], out["TcpExt"]["TCPLostRetransmit"]."""
    lines = [ln for ln in text.splitlines() if ln.strip()]
    out: dict[str, dict[str, int]] = {}
    if not lines:
        raise HealthParseError(source, "empty")
    if len(lines) % 2:
        raise HealthParseError(source, f"line {len(lines)}: a header line without its value line")
    for i in range(0, len(lines), 2):
        head, vals = lines[i].split(), lines[i + 1].split()
        if not head or not head[0].endswith(":") or head[0] != vals[0]:
            raise HealthParseError(source, f"line {i + 1}-{i + 2}: expected a 'Name: ...' header and value pair")
        if len(head) != len(vals):
            raise HealthParseError(source, f"line {i + 1}-{i + 2}: {len(head) - 1} names but {len(vals) - 1} values")
        try:
            out[head[0][:-1]] = {k: int(v) for k, v in zip(head[1:], vals[1:], strict=True)}
        except ValueError:
            raise HealthParseError(source, f"line {i + 2}: a value is not an integer") from None
    return out


parse_proc_net_netstat = parse_proc_net_snmp


# --------------------------------------------------------------------------------------------------
# tc -s qdisc show
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class QdiscStats:
    dev: str
    kind: str
    handle: str
    parent: str | None  # None for the root qdisc
    bytes: int | None
    packets: int | None
    drops: int | None
    overlimits: int | None
    requeues: int | None
    backlog: int | None  # bytes
    qlen: int | None

    @property
    def key(self) -> str:
        """Stable identity of a qdisc across snapshots: dev, handle and parent."""
        return f"{self.dev}/{self.handle}/{self.parent or 'root'}"

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "key": self.key}


def _int_or_none(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def parse_tc_qdisc_json(text: str, source: str = "tc -s -j qdisc show") -> list[QdiscStats]:
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise HealthParseError(source, f"line {exc.lineno}: not JSON ({exc.msg})") from None
    if not isinstance(doc, list):
        raise HealthParseError(source, "expected a JSON array of qdiscs")
    out: list[QdiscStats] = []
    for i, q in enumerate(doc):
        if not isinstance(q, dict) or not isinstance(q.get("dev"), str) or not isinstance(q.get("kind"), str):
            raise HealthParseError(source, f"element {i}: expected an object with dev and kind")
        out.append(QdiscStats(q["dev"], q["kind"], str(q.get("handle", "")),
                              None if q.get("root") else (str(q["parent"]) if "parent" in q else None),
                              _int_or_none(q.get("bytes")), _int_or_none(q.get("packets")),
                              _int_or_none(q.get("drops")), _int_or_none(q.get("overlimits")),
                              _int_or_none(q.get("requeues")), _int_or_none(q.get("backlog")),
                              _int_or_none(q.get("qlen"))))
    return out


_QDISC_HEAD = re.compile(r"^qdisc (?P<kind>\S+) (?P<handle>\S+) dev (?P<dev>\S+) (?:(?P<root>root)|parent (?P<parent>\S+))")
_QDISC_SENT = re.compile(r"^\s+Sent (?P<bytes>\d+) bytes (?P<pkts>\d+) pkt \(dropped (?P<drops>\d+), "
                         r"overlimits (?P<over>\d+) requeues (?P<req>\d+)\)")
_QDISC_BACKLOG = re.compile(r"^\s+backlog (?P<b>\d+)b (?P<p>\d+)p")


def parse_tc_qdisc_text(text: str, source: str = "tc -s qdisc show") -> list[QdiscStats]:
    out: list[QdiscStats] = []
    head: dict[str, Any] | None = None
    for n, line in enumerate(text.splitlines(), start=1):
        if line.startswith("qdisc "):
            if head is not None:
                out.append(_qdisc_from(head))
            m = _QDISC_HEAD.match(line)
            if not m:
                raise HealthParseError(source, f"line {n}: unrecognised qdisc line {line[:80]!r}")
            head = {"dev": m.group("dev"), "kind": m.group("kind"), "handle": m.group("handle"),
                    "parent": None if m.group("root") else m.group("parent")}
            continue
        if head is None:
            if line.strip():
                raise HealthParseError(source, f"line {n}: expected a 'qdisc KIND HANDLE dev DEV' line")
            continue
        m = _QDISC_SENT.match(line)
        if m:
            head.update(bytes=int(m.group("bytes")), packets=int(m.group("pkts")), drops=int(m.group("drops")),
                        overlimits=int(m.group("over")), requeues=int(m.group("req")))
            continue
        m = _QDISC_BACKLOG.match(line)
        if m:
            head.update(backlog=int(m.group("b")), qlen=int(m.group("p")))
    if head is not None:
        out.append(_qdisc_from(head))
    return out


def _qdisc_from(h: dict[str, Any]) -> QdiscStats:
    return QdiscStats(h["dev"], h["kind"], h["handle"], h["parent"], h.get("bytes"), h.get("packets"),
                      h.get("drops"), h.get("overlimits"), h.get("requeues"), h.get("backlog"), h.get("qlen"))


# --------------------------------------------------------------------------------------------------
# InfiniBand: /sys/class/infiniband/<dev>/ports/<n>/
# --------------------------------------------------------------------------------------------------

IB_ERROR_COUNTERS = ("symbol_error", "link_downed", "link_error_recovery", "port_rcv_errors")
IB_OTHER_ERROR_COUNTERS = ("excessive_buffer_overrun_errors", "local_link_integrity_errors",
                           "port_rcv_remote_physical_errors", "port_xmit_discards", "port_rcv_switch_relay_errors",
                           "port_rcv_constraint_errors", "port_xmit_constraint_errors", "VL15_dropped")


@dataclass(frozen=True)
class IbPort:
    device: str
    port: int
    state: str | None  # ACTIVE, DOWN, INIT, ARMED ... (from "4: ACTIVE")
    phys_state: str | None  # LinkUp, Polling, Disabled ...
    rate_gbps: float | None
    width: str | None  # 4X, 1X ...
    link_layer: str | None  # InfiniBand or Ethernet (RoCE)
    counters: dict[str, int | None]

    @property
    def name(self) -> str:
        return f"{self.device}-{self.port}"

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def parse_ib_state(text: str | None) -> tuple[int | None, str | None]:
    """'4: ACTIVE' -> (4, 'ACTIVE'); '5: LinkUp' -> (5, 'LinkUp')."""
    if _is_unknown(text):
        return None, None
    assert text is not None
    m = re.match(r"\s*(\d+)\s*:\s*(\S+)", text)
    if m:
        return int(m.group(1)), m.group(2)
    return None, text.strip() or None


def parse_ib_rate(text: str | None) -> tuple[float | None, str | None]:
    """'200 Gb/sec (4X HDR)' -> (200.0, '4X'); '40 Gb/sec (4X QDR)' -> (40.0, '4X')."""
    if _is_unknown(text):
        return None, None
    assert text is not None
    m = re.match(r"\s*(\d+(?:\.\d+)?)\s*Gb/sec(?:\s*\((\d+X)[^)]*\))?", text)
    if not m:
        return None, None
    return float(m.group(1)), m.group(2)


def parse_ib_port(device: str, port: int, files: Mapping[str, str], counters: Mapping[str, str]) -> IbPort:
    """One port from its attribute files (state, phys_state, rate, link_layer) and counters/* texts."""
    rate, width = parse_ib_rate(files.get("rate"))
    return IbPort(device, port, parse_ib_state(files.get("state"))[1], parse_ib_state(files.get("phys_state"))[1],
                  rate, width, (files.get("link_layer") or "").strip() or None,
                  {k: to_int(v) for k, v in sorted(counters.items())})


def read_infiniband(sysfs: str | os.PathLike[str]) -> list[IbPort]:
    """Read <sysfs>/class/infiniband/*/ports/*. Raises FileNotFoundError when the class directory is absent
    (no RDMA driver loaded)."""
    base = Path(sysfs) / "class" / "infiniband"
    if not base.is_dir():
        raise FileNotFoundError(str(base))
    ports: list[IbPort] = []
    for dev in sorted(base.iterdir()):
        pdir = dev / "ports"
        if not pdir.is_dir():
            continue
        for p in sorted(pdir.iterdir(), key=lambda x: (not x.name.isdigit(), int(x.name) if x.name.isdigit() else 0)):
            if not p.name.isdigit():
                continue
            files = {n: _read(p / n) for n in ("state", "phys_state", "rate", "link_layer") if (p / n).is_file()}
            cdir = p / "counters"
            counters = {f.name: _read(f) for f in sorted(cdir.iterdir()) if f.is_file()} if cdir.is_dir() else {}
            ports.append(parse_ib_port(dev.name, int(p.name), files, counters))
    return ports


# --------------------------------------------------------------------------------------------------
# dcgmi diag -j
# --------------------------------------------------------------------------------------------------

DCGM_STATUSES = ("pass", "fail", "warn", "skip", "not-run")


@dataclass(frozen=True)
class DcgmResult:
    category: str
    test: str
    gpu: int | None  # None: a result for all GPUs (the software/deployment tests) or one without an id
    status: str  # pass | fail | warn | skip | not-run
    messages: tuple[str, ...]

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> DcgmResult:
        """The inverse of as_dict (a snapshot's stored results)."""
        gpu = data.get("gpu")
        return cls(str(data.get("category") or ""), str(data.get("test") or ""),
                   int(gpu) if isinstance(gpu, int) else None, str(data.get("status") or "not-run"),
                   tuple(str(m) for m in data.get("messages") or ()))


def _dcgm_status(text: Any) -> str:
    low = str(text or "").strip().lower().replace("_", " ")
    if low in ("pass", "passed"):
        return "pass"
    if low in ("fail", "failed"):
        return "fail"
    if low in ("warn", "warning"):
        return "warn"
    if low in ("skip", "skipped"):
        return "skip"
    # "Not Run", "" and words this parser has never seen: never read as a pass
    return "not-run"


def _dcgm_messages(result: Mapping[str, Any]) -> tuple[str, ...]:
    msgs: list[str] = []
    for key in ("warnings", "info", "warning"):
        value = result.get(key)
        items = value if isinstance(value, list) else [value] if value else []
        for item in items:
            if isinstance(item, dict):
                text = item.get("warning") or item.get("message") or item.get("info")
                if text:
                    msgs.append(str(text))
            elif item:
                msgs.append(str(item))
    return tuple(msgs)


def _dcgm_gpu(result: Mapping[str, Any]) -> int | None:
    if "entity_id" in result:  # DCGM 4: entity_group GPU + entity_id
        if str(result.get("entity_group", "GPU")).upper() not in ("GPU", ""):
            return None
        return _int_or_none(result.get("entity_id"))
    for key in ("gpu_id", "gpu_ids"):  # DCGM 2/3: a string, "0" (or "0,1" for a combined result)
        value = result.get(key)
        if isinstance(value, int):
            return value
        if isinstance(value, str) and value.strip().isdigit():
            return int(value.strip())
    return None


def parse_dcgmi_diag_json(text: str, source: str = "dcgmi diag -j") -> list[DcgmResult]:
    """`dcgmi diag -r N -j` (DCGM 2.x/3.x "DCGM GPU Diagnostic", DCGM 4.x "DCGM Diagnostic" with
    entity_group/entity_id and a test_summary) -> one DcgmResult per test and GPU. A banner before the JSON
    ("Successfully ran diagnostic for group.") is skipped. A test without per-GPU results contributes its
    test_summary status."""
    start = text.find("{")
    if start < 0:
        raise HealthParseError(source, "no JSON object in the output")
    try:
        doc = json.loads(text[start:])
    except json.JSONDecodeError as exc:
        raise HealthParseError(source, f"line {exc.lineno}: not JSON ({exc.msg})") from None
    if not isinstance(doc, dict):
        raise HealthParseError(source, "expected a JSON object")
    diag = doc.get("DCGM GPU Diagnostic", doc.get("DCGM Diagnostic"))
    if not isinstance(diag, dict):
        raise HealthParseError(source, "no 'DCGM GPU Diagnostic' or 'DCGM Diagnostic' object")
    categories = diag.get("test_categories")
    if not isinstance(categories, list):
        if diag.get("runtime_error"):
            raise HealthParseError(source, f"runtime_error: {diag['runtime_error']}")
        raise HealthParseError(source, "no test_categories array")
    out: list[DcgmResult] = []
    for ci, cat in enumerate(categories):
        if not isinstance(cat, dict) or not isinstance(cat.get("tests"), list):
            raise HealthParseError(source, f"test_categories[{ci}]: expected an object with a tests array")
        cname = str(cat.get("category", ""))
        for ti, test in enumerate(cat["tests"]):
            if not isinstance(test, dict):
                raise HealthParseError(source, f"test_categories[{ci}].tests[{ti}]: expected an object")
            tname = str(test.get("name", ""))
            raw_results = test.get("results")
            results: list[Any] = raw_results if isinstance(raw_results, list) else []
            summary = test.get("test_summary") if isinstance(test.get("test_summary"), dict) else None
            for r in results:
                if isinstance(r, dict):
                    out.append(DcgmResult(cname, tname, _dcgm_gpu(r), _dcgm_status(r.get("status")),
                                          _dcgm_messages(r)))
            if not results and summary is not None:
                out.append(DcgmResult(cname, tname, None, _dcgm_status(summary.get("status")),
                                      _dcgm_messages(summary)))
    return out


# --------------------------------------------------------------------------------------------------
# nvbandwidth
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class NvbandwidthResult:
    testcase: str | None  # None when the output shows a matrix without its "Running X." line
    description: str | None  # e.g. memcpy CE CPU(row) -> GPU(column) bandwidth (GB/s)
    sum_gbps: float | None
    matrix: tuple[tuple[float | None, ...], ...]  # N/A cells are None
    status: str = "passed"  # passed | waived | error | not-found (json); text output: passed or waived

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


_NVB_RUNNING = re.compile(r"^Running (\S+?)\.?$")
_NVB_WAIVED = re.compile(r"^Waiving (\S+?)\.?$")
_NVB_SUM = re.compile(r"^SUM (\S+) (\S+)$")


def _nvb_cell(tok: str) -> float | None:
    if tok.upper() == "N/A":
        return None
    value = float(tok)
    return value if math.isfinite(value) else None


def parse_nvbandwidth(text: str, source: str = "nvbandwidth") -> list[NvbandwidthResult]:
    """nvbandwidth's text output (per testcase: 'Running NAME.', a description line, a matrix with a column
    header row, 'SUM NAME VALUE') or its --json output -> per-testcase sum and matrix."""
    stripped = text.lstrip()
    if stripped.startswith("{"):
        return _nvbandwidth_json(stripped, source)
    out: list[NvbandwidthResult] = []
    name: str | None = None
    desc: str | None = None
    rows: list[tuple[float | None, ...]] = []
    total: float | None = None
    open_case = False

    def close() -> None:
        nonlocal name, desc, rows, total, open_case
        if open_case:
            out.append(NvbandwidthResult(name, desc, total, tuple(rows)))
        name, desc, rows, total, open_case = None, None, [], None, False

    for n, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if m := _NVB_RUNNING.match(line):
            close()
            name, open_case = m.group(1), True
            continue
        if m := _NVB_WAIVED.match(line):
            close()
            out.append(NvbandwidthResult(m.group(1), None, None, (), "waived"))
            continue
        if "bandwidth (GB/s)" in line:
            if desc is not None and rows:  # a second matrix without its own Running line
                close()
            desc, open_case = line, True
            continue
        if m := _NVB_SUM.match(line):
            try:
                total = float(m.group(2))
            except ValueError:
                raise HealthParseError(source, f"line {n}: SUM value {m.group(2)!r} is not a number") from None
            if name is None:
                name = m.group(1)
            close()
            continue
        if desc is None or not line:
            continue
        toks = line.split()
        if all(t.isdigit() for t in toks) and not rows:  # the column header row
            continue
        if toks[0].isdigit():
            try:
                rows.append(tuple(_nvb_cell(t) for t in toks[1:]))
            except ValueError:
                raise HealthParseError(source, f"line {n}: matrix cell is not a number: {line[:80]!r}") from None
    close()
    return out


def _nvbandwidth_json(text: str, source: str) -> list[NvbandwidthResult]:
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise HealthParseError(source, f"line {exc.lineno}: not JSON ({exc.msg})") from None
    cases = doc.get("nvbandwidth", {}).get("testcases") if isinstance(doc, dict) else None
    if not isinstance(cases, list):
        raise HealthParseError(source, "no nvbandwidth.testcases array")
    out: list[NvbandwidthResult] = []
    for i, case in enumerate(cases):
        if not isinstance(case, dict):
            raise HealthParseError(source, f"testcases[{i}]: expected an object")
        matrix = case.get("bandwidth_matrix") or []
        try:
            rows = tuple(tuple(_nvb_cell(str(c)) for c in row) for row in matrix)
        except (ValueError, TypeError):
            raise HealthParseError(source, f"testcases[{i}]: bandwidth_matrix has a cell that is not a number") from None
        total = case.get("sum")
        status = str(case.get("status", "")).strip().lower().replace(" ", "-") or "not-run"
        out.append(NvbandwidthResult(case.get("name"), case.get("bandwidth_description"),
                                     float(total) if isinstance(total, int | float) else None, rows, status))
    return out
