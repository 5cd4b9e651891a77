"""Ethernet and TCP/IP: the sources `net` (NIC counters), `snmp` (the kernel's TCP and IPv4 MIB) and `qdisc`
(traffic-control queues), in one module because they are judged together: a lossy link shows in all three,
and only together do they tell the node that lost packets from its peers that retransmitted (demote_symptoms).

    net    {"interfaces": {iface: {counter: int|null}},         /sys/class/net/*/statistics (lo skipped)
            "physical": [iface]}                                 those with a device (not a bridge, veth ...)
    snmp   {"tcp": {...}, "ip": {...}, "tcp_ext": {...}|absent}  /proc/net/snmp Tcp and Ip,
                                                                 /proc/net/netstat TcpExt
    qdisc  {"format": "json"|"text", "qdiscs": [...]}            tc -s -j qdisc show, else tc -s qdisc show

Findings: `link` at [health] net_severity (CRITICAL by default) for NIC errors or drops, TCP retransmits, IPv4
packets lost in the node itself and qdisc drops over their limits; `vanished` CRITICAL for a physical NIC
in the before snapshot and not in the after one (where a snapshot has no "physical" list, an interface whose
name is not a virtual one's: VIRTUAL_PREFIXES).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from gpuclust.accept.health.kit import (
    COMMAND_TIMEOUT_S,
    HealthFinding,
    HealthParseError,
    HealthPaths,
    Judge,
    Snap,
    Source,
    Unavailable,
    bounded_int,
    checkable,
    guard,
    int_or_none,
    ok,
    read_sysfs,
    run,
    source_data,
    to_int,
)
from gpuclust.accept.health.shape import integer, list_of, map_of, obj, string
from gpuclust.exitcodes import Nagios

# -- net: /sys/class/net/*/statistics --------------------------------------------------------------------------


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
        tree[iface.name] = {f.name: read_sysfs(f) for f in sorted((iface / "statistics").iterdir()) if f.is_file()}
    return parse_net_statistics(tree)


# -- snmp: /proc/net/snmp and /proc/net/netstat --------------------------------------------------------------


def parse_proc_net_snmp(text: str, source: str = "/proc/net/snmp") -> dict[str, dict[str, int | None]]:
    """The header/value line pairs of /proc/net/snmp (and /proc/net/netstat, the same format) ->
    {section: {field: value}}, e.g. out["Tcp"]["RetransSegs"], out["TcpExt"]["TCPLostRetransmit"]. A value
    past 64 bits is None (unknown), one that is no integer a parse error."""
    lines = [ln for ln in text.splitlines() if ln.strip()]
    out: dict[str, dict[str, int | None]] = {}
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
        if not all(_INTEGER.fullmatch(v) for v in vals[1:]):
            raise HealthParseError(source, f"line {i + 2}: a value is not an integer")
        out[head[0][:-1]] = {k: bounded_int(v) for k, v in zip(head[1:], vals[1:], strict=True)}
    return out


_INTEGER = re.compile(r"[+-]?[0-9]+")
parse_proc_net_netstat = parse_proc_net_snmp


# -- qdisc: tc -s qdisc show ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class QdiscStats:
    """One queue of `tc -s qdisc show`: its device, kind, handle and parent, and its counters."""

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
                              int_or_none(q.get("bytes")), int_or_none(q.get("packets")),
                              int_or_none(q.get("drops")), int_or_none(q.get("overlimits")),
                              int_or_none(q.get("requeues")), int_or_none(q.get("backlog")),
                              int_or_none(q.get("qlen"))))
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
            head.update(bytes=bounded_int(m.group("bytes")), packets=bounded_int(m.group("pkts")),
                        drops=bounded_int(m.group("drops")), overlimits=bounded_int(m.group("over")),
                        requeues=bounded_int(m.group("req")))
            continue
        m = _QDISC_BACKLOG.match(line)
        if m:
            head.update(backlog=bounded_int(m.group("b")), qlen=bounded_int(m.group("p")))
    if head is not None:
        out.append(_qdisc_from(head))
    return out


def _qdisc_from(h: dict[str, Any]) -> QdiscStats:
    return QdiscStats(h["dev"], h["kind"], h["handle"], h["parent"], h.get("bytes"), h.get("packets"),
                      h.get("drops"), h.get("overlimits"), h.get("requeues"), h.get("backlog"), h.get("qlen"))


# -- collectors ----------------------------------------------------------------------------------------------


def physical_interfaces(sysfs: str | os.PathLike[str], names: Iterable[str]) -> list[str]:
    """The interfaces with a device behind them (<sysfs>/class/net/<iface>/device): a NIC, not a bridge,
    bond, veth or tunnel, which come and go with the jobs and containers."""
    base = Path(sysfs) / "class" / "net"
    return sorted(n for n in names if (base / n / "device").exists())


def collect_net(paths: HealthPaths) -> dict[str, Any]:
    def read() -> dict[str, Any]:
        interfaces = read_net_statistics(paths.sysfs)
        return ok(interfaces=interfaces, physical=physical_interfaces(paths.sysfs, interfaces))

    return guard(read)


def collect_snmp(paths: HealthPaths) -> dict[str, Any]:
    def read() -> dict[str, Any]:
        snmp_path = Path(paths.proc) / "net" / "snmp"
        snmp = parse_proc_net_snmp(snmp_path.read_text(encoding="utf-8"), str(snmp_path))
        if "Tcp" not in snmp:
            raise HealthParseError(str(snmp_path), "no Tcp section")
        data: dict[str, Any] = {"tcp": snmp["Tcp"]}
        if "Ip" in snmp:  # where the node itself lost packets: received-not-delivered, requested-not-sent
            data["ip"] = snmp["Ip"]
        netstat_path = Path(paths.proc) / "net" / "netstat"
        try:  # TcpExt is a bonus: its absence does not make the source unavailable
            ext = parse_proc_net_netstat(netstat_path.read_text(encoding="utf-8"), str(netstat_path))
            if "TcpExt" in ext:
                data["tcp_ext"] = ext["TcpExt"]
        except (OSError, HealthParseError) as exc:
            data["tcp_ext_unavailable"] = str(exc)
        return ok(**data)

    return guard(read)


def collect_qdisc(paths: HealthPaths, timeout: float = COMMAND_TIMEOUT_S) -> dict[str, Any]:
    def read() -> dict[str, Any]:
        try:  # JSON output (iproute2 >= 4.13); older tc refuses -j
            out = run([paths.tc, "-s", "-j", "qdisc", "show"], timeout)
            return ok(format="json", qdiscs=[q.as_dict() for q in parse_tc_qdisc_json(out)])
        except (Unavailable, HealthParseError) as first:
            if isinstance(first, Unavailable) and "not found" in str(first):
                raise
            out = run([paths.tc, "-s", "qdisc", "show"], timeout)
            return ok(format="text", qdiscs=[q.as_dict() for q in parse_tc_qdisc_text(out)])

    return guard(read)


# -- rules ---------------------------------------------------------------------------------------------------


def _severity(j: Judge) -> Nagios:
    return Nagios.CRITICAL if j.cfg.net_severity == "critical" else Nagios.WARNING


# Interfaces that are no hardware, for snapshots written before "physical" was recorded: container and VM
# plumbing, bridges, tunnels, the Slurm lab's own (slab*).
VIRTUAL_PREFIXES = ("veth", "docker", "br", "virbr", "vnet", "cali", "flannel", "cni", "tun", "tap", "vxlan",
                    "geneve", "ifb", "dummy", "kube", "lxc", "wg", "weave", "podman", "cilium", "tailscale", "zt",
                    "slab", "bond", "team", "macvlan", "ipvlan", "gre", "sit", "ip6", "erspan", "nlmon")


def _vanished_nics(j: Judge, before: Snap, after: Snap) -> None:
    """A NIC in the before snapshot and not in the after one: it left the bus, or its driver let it go."""
    b = source_data(before, "net")
    if b is None or not checkable(after, "net"):
        return
    a = source_data(after, "net") or {}
    present = a.get("interfaces", {})
    physical = b.get("physical")
    candidates = physical if physical is not None else [i for i in b.get("interfaces", {})
                                                         if not i.startswith(VIRTUAL_PREFIXES)]
    for iface in sorted(set(candidates)):
        if iface in present:
            continue
        why = "the net source answered nothing after the run" if not a else "not in the after snapshot"
        j.add("vanished", Nagios.CRITICAL, f"nic-{iface}", f"{j.node}: NIC {iface} present before the run, gone "
              f"after it ({why})", iface=iface)


def judge_net(j: Judge, before: Snap, after: Snap) -> None:
    _vanished_nics(j, before, after)
    a, b = source_data(after, "net"), source_data(before, "net")
    if a is None or b is None:
        return
    for iface, ca in sorted(a.get("interfaces", {}).items()):
        cb = b.get("interfaces", {}).get(iface)
        if cb is None:
            continue
        for counter in NET_COUNTERS_ERRORS:
            d = j.delta(f"{iface} {counter}", f"{iface}-{counter}", cb.get(counter), ca.get(counter))
            if d is not None and d > j.cfg.net_error_max:
                j.add("link", _severity(j), f"{iface}-{counter}", f"{j.node}: {iface} {counter} "
                      f"{cb.get(counter)} -> {ca.get(counter)} (+{d})", iface=iface, counter=counter,
                      before=cb.get(counter), after=ca.get(counter))
        for counter in NET_COUNTERS_DROPS:
            d = j.delta(f"{iface} {counter}", f"{iface}-{counter}", cb.get(counter), ca.get(counter))
            if d is None or d == 0:
                continue
            pk = "rx_packets" if counter.startswith("rx") else "tx_packets"
            packets = j.delta(f"{iface} {pk}", f"{iface}-{pk}", cb.get(pk), ca.get(pk))
            ratio = d / packets if packets else None
            ratio_judged = packets is not None and packets >= 1 / max(j.cfg.net_drop_ratio_max, 1e-12)
            if d > j.cfg.net_drop_max or (ratio_judged and ratio is not None
                                             and ratio > j.cfg.net_drop_ratio_max):
                j.add("link", _severity(j), f"{iface}-{counter}", f"{j.node}: {iface} {counter} "
                      f"{cb.get(counter)} -> {ca.get(counter)} (+{d} of {packets} packets)", iface=iface,
                      counter=counter, delta=d, packets=packets, ratio=ratio)


def judge_snmp(j: Judge, before: Snap, after: Snap) -> None:
    _tcp(j, before, after)
    _ip(j, before, after)


def _tcp(j: Judge, before: Snap, after: Snap) -> None:
    a, b = source_data(after, "snmp"), source_data(before, "snmp")
    if a is None or b is None:
        return
    ta, tb = a.get("tcp", {}), b.get("tcp", {})
    out = j.delta("Tcp OutSegs", "tcp-outsegs", tb.get("OutSegs"), ta.get("OutSegs"))
    retr = j.delta("Tcp RetransSegs", "tcp-retranssegs", tb.get("RetransSegs"), ta.get("RetransSegs"))
    if out is None or retr is None or out < max(j.cfg.tcp_min_segments, 1):
        return
    # A retransmission the receiver reports with a D-SACK (it had the segment already) was spurious: reordering
    # or a late ACK on a loaded host, not loss. Seen on the lab under CPU load: 662 retransmits, 662 D-SACKed.
    xa, xb = a.get("tcp_ext") or {}, b.get("tcp_ext") or {}
    spurious = j.delta("TcpExt TCPDSACKRecvSegs", "tcp-dsackrecvsegs", xb.get("TCPDSACKRecvSegs"),
                       xa.get("TCPDSACKRecvSegs")) if "TCPDSACKRecvSegs" in xa and "TCPDSACKRecvSegs" in xb \
     else None
    lost = max(0, retr - (spurious or 0))
    ratio = lost / out
    if ratio > j.cfg.tcp_retrans_ratio_max:
        what = f"{lost} of {out} segments" + (f" ({retr} retransmitted, {spurious} of them spurious)"
                                             if spurious else "")
        j.add("link", _severity(j), "tcp-retrans", f"{j.node}: TCP retransmitted {what} "
              f"({ratio:.2%} > {j.cfg.tcp_retrans_ratio_max:.2%})", retrans=retr, spurious=spurious,
              lost=lost, out=out, ratio=ratio)


def _ip(j: Judge, before: Snap, after: Snap) -> None:
    """Packets the node itself lost, in and out (IPv4 MIB): the cause where a peer only sees retransmits."""
    a, b = source_data(after, "snmp"), source_data(before, "snmp")
    if a is None or b is None or not a.get("ip") or not b.get("ip"):
        return
    ia, ib = a["ip"], b["ip"]

    def d(key: str) -> int | None:
        if key not in ia or key not in ib:
            return None
        return j.delta(f"Ip {key}", f"ip-{key.lower()}", ib.get(key), ia.get(key))

    received, delivered = d("InReceives"), d("InDelivers")
    forwarded, reasm_in, reasm_ok = d("ForwDatagrams") or 0, d("ReasmReqds") or 0, d("ReasmOKs") or 0
    if received is not None and delivered is not None:
        lost = received - delivered - forwarded - max(0, reasm_in - reasm_ok)
        _ip_lost(j, "in", "received but not delivered", lost, received)
    requested, transmitted = d("OutRequests"), d("OutTransmits")  # OutTransmits: kernel 6.3 on
    if requested is not None and transmitted is not None:
        frags = max(0, (d("FragCreates") or 0) - (d("FragOKs") or 0))
        lost = requested + forwarded + frags - transmitted
        _ip_lost(j, "out", "requested but not transmitted", lost, requested)


def _ip_lost(j: Judge, direction: str, what: str, lost: int, packets: int) -> None:
    if lost <= j.cfg.ip_lost_max or packets <= 0:
        return
    ratio = lost / packets
    if ratio > j.cfg.ip_lost_ratio_max:
        j.add("link", _severity(j), f"ip-lost-{direction}", f"{j.node}: {lost} of {packets} IPv4 "
              f"packets {what} during the run ({ratio:.2%})", direction=direction, lost=lost,
              packets=packets, ratio=ratio)


def judge_qdisc(j: Judge, before: Snap, after: Snap) -> None:
    a, b = source_data(after, "qdisc"), source_data(before, "qdisc")
    if a is None or b is None:
        return
    prior = {q.get("key"): q for q in b.get("qdiscs", [])}
    for q in a.get("qdiscs", []):
        pq = prior.get(q.get("key"))
        if pq is None:
            continue
        label = f"{q.get('dev')}-{q.get('kind')}-{q.get('handle')}"
        d = j.delta(f"qdisc {q.get('key')} drops", f"{label}-drops", pq.get("drops"), q.get("drops"))
        if d is not None and d > j.cfg.qdisc_drop_max:
            j.add("link", _severity(j), f"{q.get('dev')}-qdisc-drops", f"{j.node}: qdisc {q.get('kind')} "
                  f"on {q.get('dev')} ({q.get('key')}) dropped {pq.get('drops')} -> {q.get('drops')} (+{d})",
                  key=q.get("key"), delta=d)


# A node's own loss counters (the cause) against TCP retransmits, which show on the SENDER: a node that drops
# what it receives makes its peers retransmit, so their retransmits are the symptom of its fault.
CAUSE_DETAILS = re.compile(r"^(ip-lost-(in|out)|.+-qdisc-drops|.+-(rx|tx)_.+)$")


def demote_symptoms(found: list[HealthFinding]) -> list[HealthFinding]:
    """Where some node of the job lost packets itself (IP, NIC or qdisc counters), the TCP retransmit findings of
    the OTHER nodes become OK-level notes naming it: the retransmits are its peers' symptom, and draining them
    would drain the healthy senders. Without such a node, retransmits stand (a loss between the nodes)."""
    causes = sorted({f.node for f in found if f.cls == "link" and f.severity != Nagios.OK
                     and CAUSE_DETAILS.match(f.detail)})
    if not causes:
        return found
    out = []
    for f in found:
        if f.cls == "link" and f.detail == "tcp-retrans" and f.node not in causes:
            f = HealthFinding(f.node, f.cls, Nagios.OK, f.detail,
                              f"{f.message}; a symptom: {', '.join(causes)} lost packets itself",
                              {**f.evidence, "symptom_of": causes})
        out.append(f)
    return out


# The snapshots' data (each Source's shape).
NET_SHAPE = obj({"interfaces": map_of(map_of(integer(True))), "physical": list_of(string())},
                required=["interfaces"])
_MIB = map_of(integer(True))
SNMP_SHAPE = obj({"tcp": _MIB, "ip": _MIB, "tcp_ext": _MIB, "tcp_ext_unavailable": string()}, required=["tcp"])
QDISC_SHAPE = obj({"format": string(enum=("json", "text")), "qdiscs": list_of(obj({
    "dev": string(), "kind": string(), "handle": string(), "parent": string(True), "key": string(),
    **{k: integer(True) for k in ("bytes", "packets", "drops", "overlimits", "requeues", "backlog", "qlen")}},
    required=["dev", "kind", "key"]))}, required=["qdiscs"])

NET = Source("net", lambda r: collect_net(r.paths), judge_net, shape=NET_SHAPE)
SNMP = Source("snmp", lambda r: collect_snmp(r.paths), judge_snmp, across_nodes=demote_symptoms, shape=SNMP_SHAPE)
QDISC = Source("qdisc", lambda r: collect_qdisc(r.paths), judge_qdisc, shape=QDISC_SHAPE)
