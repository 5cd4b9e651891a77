"""Judge a node's before/after health snapshots: what the run caused (deltas) and the state the node is in
(absolute values after the run). Thresholds come from [health] (gpuclust.config.health, defaults and their
reasons there).

Classes and severities (gpuclust.exitcodes.Nagios):
  xid          an Xid in the run's window: CRITICAL for codes in xid_critical, else WARNING
  ecc          uncorrectable volatile ECC grew, or the aggregate exceeds ecc_uncorrectable_max: CRITICAL;
               correctable grew by more than ecc_correctable_max: WARNING
  remap        row remap pending/failed, or a page retirement pending: CRITICAL (needs a GPU reset / RMA)
  throttle     HW slowdown, HW thermal, HW power brake or SW thermal active after the run: WARNING
  pcie         link below max width, or below max generation while the GPU is busy: pcie_severity
  link         NIC errors/drops, TCP retransmits, qdisc drops over their limits: net_severity (CRITICAL
               by default); IB error counters grew or a port went down: CRITICAL
  topology     an IB port below ib_rate_gbps: ib_rate_severity
  dcgm         dcgmi diag fail: CRITICAL, warn: WARNING
  reset        a counter went backwards (reboot, driver reload, wrap): UNKNOWN, and its delta is not used
  unavailable  a source unavailable in either snapshot: UNKNOWN when [health] require lists it, else OK (a
               visible note that does not change the exit code); a node without both snapshots: UNKNOWN

PCIe generation: GPUs drop their link to gen1 when idle to save power, so an idle snapshot says nothing about
the gen the slot trains to. The generation is judged only when the GPU is not idle (its gpu_idle clock event
reason is "Not Active"); max is the lower of device and host max where the driver reports both (R535+), so
a gen4 GPU in a gen3 host is not a finding. The width is judged always: it does not drop at idle.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpuclust.accept.health.collect import SOURCES
from gpuclust.accept.health.parse import (
    IB_ERROR_COUNTERS,
    IB_OTHER_ERROR_COUNTERS,
    NET_COUNTERS_DROPS,
    NET_COUNTERS_ERRORS,
    DcgmResult,
    parse_iso_time,
)
from gpuclust.config.health import HealthConfig
from gpuclust.exitcodes import Nagios
from gpuclust.findings import Finding

CLASSES = ("xid", "ecc", "remap", "throttle", "pcie", "link", "topology", "unavailable", "reset", "dcgm")

# Clock event reasons that mean the hardware held the clocks down (not the idle or application settings).
THROTTLE_REASONS = ("hw_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown", "sw_thermal_slowdown")

_SLUG_BAD = re.compile(r"[^a-z0-9._-]+")


def slug(text: str) -> str:
    """A drain-reason-safe token: [a-z0-9._-]+."""
    out = _SLUG_BAD.sub("-", text.lower()).strip("-")
    return out or "unknown"


@dataclass(frozen=True)
class HealthFinding:
    node: str
    cls: str  # one of CLASSES
    severity: Nagios
    detail: str  # slug, safe for a drain reason
    message: str
    evidence: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.cls not in CLASSES:
            raise ValueError(f"unknown health finding class {self.cls!r}")
        object.__setattr__(self, "detail", slug(self.detail))


def to_finding(hf: HealthFinding, job_id: str | None, kind: str | None) -> Finding:
    """The project-wide Finding (check = health-<cls>)."""
    # details["class"] (not a keyword argument: Finding.make's own first parameter is named cls)
    details = {"class": hf.cls, "detail": hf.detail, "evidence": hf.evidence}
    return Finding.make(f"health-{hf.cls}", hf.severity, hf.message, [hf.node], job_id=job_id, kind=kind,
                        **details)


def _source(snap: Mapping[str, Any] | None, name: str) -> Mapping[str, Any] | None:
    """The source's data when it is ok, else None."""
    if not snap:
        return None
    src = snap.get("sources", {}).get(name)
    return src if isinstance(src, Mapping) and src.get("status") == "ok" else None


def _num(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


class _Judge:
    def __init__(self, node: str, cfg: HealthConfig):
        self.node, self.cfg = node, cfg
        self.out: list[HealthFinding] = []

    @property
    def net_severity(self) -> Nagios:
        return Nagios.CRITICAL if self.cfg.net_severity == "critical" else Nagios.WARNING

    def add(self, cls: str, severity: Nagios, detail: str, message: str, **evidence: Any) -> None:
        self.out.append(HealthFinding(self.node, cls, severity, detail, message, evidence))

    def delta(self, what: str, detail: str, before: Any, after: Any) -> int | None:
        """after - before, or None when either is unknown. A counter that went backwards (reboot, driver
        reload, 32/64-bit wrap) is a `reset` finding and yields None: never a false failure, never silent."""
        b, a = _num(before), _num(after)
        if b is None or a is None:
            return None
        if a < b:
            self.add("reset", Nagios.UNKNOWN, detail, f"{self.node}: {what} went backwards ({b} -> {a}): "
                     "reset, reboot or wrap during the run; its change is not judged", before=b, after=a)
            return None
        return a - b

    # -- sources ------------------------------------------------------------------------------------

    def unavailable(self, before: Mapping[str, Any] | None, after: Mapping[str, Any] | None) -> None:
        for name in SOURCES:
            reasons = []
            for phase, snap in (("before", before), ("after", after)):
                src = (snap or {}).get("sources", {}).get(name)
                if not isinstance(src, Mapping):
                    reasons.append(f"{phase}: not collected")
                elif src.get("status") != "ok":
                    reasons.append(f"{phase}: {src.get('reason', 'unavailable')}")
            if reasons:
                sev = Nagios.UNKNOWN if name in self.cfg.require else Nagios.OK
                self.add("unavailable", sev, name, f"{self.node}: {name} unavailable ({'; '.join(reasons)})",
                         source=name, reasons=reasons)

    def xid(self, before: Mapping[str, Any] | None, after: Mapping[str, Any] | None) -> None:
        src = _source(after, "xid")
        if src is None:
            return
        since = src.get("since")
        before_src = _source(before, "xid")
        # Untimed lines (plain dmesg) cannot be placed in the window: ones already there before the run are old.
        seen_before: dict[str, int] = {}
        for ev in (before_src or {}).get("events", []):
            if not ev.get("timed"):
                seen_before[ev.get("line", "")] = seen_before.get(ev.get("line", ""), 0) + 1
        for ev in src.get("events", []):
            if not ev.get("timed"):
                line = ev.get("line", "")
                if seen_before.get(line, 0) > 0:
                    seen_before[line] -= 1
                    continue
            elif since:
                try:
                    if parse_iso_time(ev["time"]) < parse_iso_time(since):
                        continue
                except (ValueError, KeyError, TypeError):
                    pass
            code = _num(ev.get("code"))
            if code is None:
                continue
            sev = Nagios.CRITICAL if code in self.cfg.xid_critical else Nagios.WARNING
            self.add("xid", sev, str(code), f"{self.node}: Xid {code} on GPU {ev.get('pci')} during the run: "
                     f"{ev.get('message', '')}".rstrip(": "), pci=ev.get("pci"), code=code, time=ev.get("time"),
                     line=ev.get("line"))

    def gpus(self, before: Mapping[str, Any] | None, after: Mapping[str, Any] | None) -> None:
        src = _source(after, "nvidia_smi")
        if src is None:
            return
        prior = {g.get("pci_bus_id") or g.get("index"): g for g in (_source(before, "nvidia_smi") or {}).get("gpus", [])}
        for g in src.get("gpus", []):
            gid = g.get("pci_bus_id") or g.get("index")
            b = prior.get(gid)
            name = f"GPU {g.get('index')} ({g.get('pci_bus_id')})"
            self._ecc(name, b, g)
            self._remap(name, g)
            self._throttle(name, g)
            self._pcie(name, g)

    def _ecc(self, name: str, b: Mapping[str, Any] | None, g: Mapping[str, Any]) -> None:
        vol_a, agg_a = g.get("ecc_volatile") or {}, g.get("ecc_aggregate") or {}
        vol_b = (b or {}).get("ecc_volatile") or {}
        unc = self.delta(f"{name} volatile uncorrectable ECC", f"gpu{g.get('index')}-ecc-uncorrectable",
                         vol_b.get("uncorrectable"), vol_a.get("uncorrectable")) if b else None
        if unc:
            self.add("ecc", Nagios.CRITICAL, "uncorrectable", f"{self.node}: {name} uncorrectable volatile ECC "
                     f"errors {vol_b.get('uncorrectable')} -> {vol_a.get('uncorrectable')} during the run",
                     gpu=g.get("index"), pci=g.get("pci_bus_id"), before=vol_b.get("uncorrectable"),
                     after=vol_a.get("uncorrectable"))
        agg = _num(agg_a.get("uncorrectable"))
        if agg is not None and agg > self.cfg.ecc_uncorrectable_max:
            self.add("ecc", Nagios.CRITICAL, "uncorrectable-aggregate", f"{self.node}: {name} aggregate "
                     f"uncorrectable ECC errors {agg} > {self.cfg.ecc_uncorrectable_max}", gpu=g.get("index"),
                     pci=g.get("pci_bus_id"), aggregate=agg)
        cor = self.delta(f"{name} volatile correctable ECC", f"gpu{g.get('index')}-ecc-correctable",
                         vol_b.get("correctable"), vol_a.get("correctable")) if b else None
        if cor is not None and cor > self.cfg.ecc_correctable_max:
            self.add("ecc", Nagios.WARNING, "correctable", f"{self.node}: {name} correctable volatile ECC errors "
                     f"{vol_b.get('correctable')} -> {vol_a.get('correctable')} (+{cor} > "
                     f"{self.cfg.ecc_correctable_max})", gpu=g.get("index"), pci=g.get("pci_bus_id"), delta=cor)

    def _remap(self, name: str, g: Mapping[str, Any]) -> None:
        for key, detail, what in (("remapped_pending", "pending", "row remap pending (GPU reset needed)"),
                                  ("remapped_failure", "failure", "row remap failed (RMA)"),
                                  ("retired_pending", "retirement-pending", "page retirement pending")):
            if g.get(key) is True:
                self.add("remap", Nagios.CRITICAL, detail, f"{self.node}: {name} {what}", gpu=g.get("index"),
                         pci=g.get("pci_bus_id"), field=key)

    def _throttle(self, name: str, g: Mapping[str, Any]) -> None:
        events = g.get("clock_events") or {}
        for reason in THROTTLE_REASONS:
            if events.get(reason) is True:
                self.add("throttle", Nagios.WARNING, reason, f"{self.node}: {name} clocks held down: {reason} "
                         "active after the run", gpu=g.get("index"), pci=g.get("pci_bus_id"), reason=reason)

    def _pcie(self, name: str, g: Mapping[str, Any]) -> None:
        link = g.get("pcie") or {}
        gen, gen_max = _num(link.get("gen_current")), _num(link.get("gen_max"))
        width, width_max = _num(link.get("width_current")), _num(link.get("width_max"))
        busy = (g.get("clock_events") or {}).get("gpu_idle") is False
        low_width = width is not None and width_max is not None and width < width_max
        low_gen = busy and gen is not None and gen_max is not None and gen < gen_max
        if low_width or low_gen:
            sev = Nagios.CRITICAL if self.cfg.pcie_severity == "critical" else Nagios.WARNING
            self.add("pcie", sev, f"gen{gen}-x{width}", f"{self.node}: {name} PCIe link gen{gen} x{width}, max "
                     f"gen{gen_max} x{width_max}", gpu=g.get("index"), pci=g.get("pci_bus_id"), gen=gen,
                     gen_max=gen_max, width=width, width_max=width_max, gen_judged=busy)

    def net(self, before: Mapping[str, Any] | None, after: Mapping[str, Any] | None) -> None:
        a, b = _source(after, "net"), _source(before, "net")
        if a is None or b is None:
            return
        for iface, ca in sorted(a.get("interfaces", {}).items()):
            cb = b.get("interfaces", {}).get(iface)
            if cb is None:
                continue
            for counter in NET_COUNTERS_ERRORS:
                d = self.delta(f"{iface} {counter}", f"{iface}-{counter}", cb.get(counter), ca.get(counter))
                if d is not None and d > self.cfg.net_error_max:
                    self.add("link", self.net_severity, f"{iface}-{counter}", f"{self.node}: {iface} {counter} "
                             f"{cb.get(counter)} -> {ca.get(counter)} (+{d})", iface=iface, counter=counter,
                             before=cb.get(counter), after=ca.get(counter))
            for counter in NET_COUNTERS_DROPS:
                d = self.delta(f"{iface} {counter}", f"{iface}-{counter}", cb.get(counter), ca.get(counter))
                if d is None or d == 0:
                    continue
                pk = "rx_packets" if counter.startswith("rx") else "tx_packets"
                packets = self.delta(f"{iface} {pk}", f"{iface}-{pk}", cb.get(pk), ca.get(pk))
                ratio = d / packets if packets else None
                ratio_judged = packets is not None and packets >= 1 / max(self.cfg.net_drop_ratio_max, 1e-12)
                if d > self.cfg.net_drop_max or (ratio_judged and ratio is not None
                                                 and ratio > self.cfg.net_drop_ratio_max):
                    self.add("link", self.net_severity, f"{iface}-{counter}", f"{self.node}: {iface} {counter} "
                             f"{cb.get(counter)} -> {ca.get(counter)} (+{d} of {packets} packets)", iface=iface,
                             counter=counter, delta=d, packets=packets, ratio=ratio)

    def tcp(self, before: Mapping[str, Any] | None, after: Mapping[str, Any] | None) -> None:
        a, b = _source(after, "snmp"), _source(before, "snmp")
        if a is None or b is None:
            return
        ta, tb = a.get("tcp", {}), b.get("tcp", {})
        out = self.delta("Tcp OutSegs", "tcp-outsegs", tb.get("OutSegs"), ta.get("OutSegs"))
        retr = self.delta("Tcp RetransSegs", "tcp-retranssegs", tb.get("RetransSegs"), ta.get("RetransSegs"))
        if out is None or retr is None or out < max(self.cfg.tcp_min_segments, 1):
            return
        # A retransmission the receiver reports with a D-SACK (it had the segment already) was spurious: reordering
        # or a late ACK on a loaded host, not loss. Seen on the lab under CPU load: 662 retransmits, 662 D-SACKed.
        xa, xb = a.get("tcp_ext") or {}, b.get("tcp_ext") or {}
        spurious = self.delta("TcpExt TCPDSACKRecvSegs", "tcp-dsackrecvsegs", xb.get("TCPDSACKRecvSegs"),
                              xa.get("TCPDSACKRecvSegs")) if "TCPDSACKRecvSegs" in xa and "TCPDSACKRecvSegs" in xb \
            else None
        lost = max(0, retr - (spurious or 0))
        ratio = lost / out
        if ratio > self.cfg.tcp_retrans_ratio_max:
            what = f"{lost} of {out} segments" + (f" ({retr} retransmitted, {spurious} of them spurious)"
                                                 if spurious else "")
            self.add("link", self.net_severity, "tcp-retrans", f"{self.node}: TCP retransmitted {what} "
                     f"({ratio:.2%} > {self.cfg.tcp_retrans_ratio_max:.2%})", retrans=retr, spurious=spurious,
                     lost=lost, out=out, ratio=ratio)

    def ip(self, before: Mapping[str, Any] | None, after: Mapping[str, Any] | None) -> None:
        """Packets the node itself lost, in and out (IPv4 MIB): the cause where a peer only sees retransmits."""
        a, b = _source(after, "snmp"), _source(before, "snmp")
        if a is None or b is None or not a.get("ip") or not b.get("ip"):
            return
        ia, ib = a["ip"], b["ip"]

        def d(key: str) -> int | None:
            if key not in ia or key not in ib:
                return None
            return self.delta(f"Ip {key}", f"ip-{key.lower()}", ib.get(key), ia.get(key))

        received, delivered = d("InReceives"), d("InDelivers")
        forwarded, reasm_in, reasm_ok = d("ForwDatagrams") or 0, d("ReasmReqds") or 0, d("ReasmOKs") or 0
        if received is not None and delivered is not None:
            lost = received - delivered - forwarded - max(0, reasm_in - reasm_ok)
            self._ip_lost("in", "received but not delivered", lost, received)
        requested, transmitted = d("OutRequests"), d("OutTransmits")  # OutTransmits: kernel 6.3 on
        if requested is not None and transmitted is not None:
            frags = max(0, (d("FragCreates") or 0) - (d("FragOKs") or 0))
            lost = requested + forwarded + frags - transmitted
            self._ip_lost("out", "requested but not transmitted", lost, requested)

    def _ip_lost(self, direction: str, what: str, lost: int, packets: int) -> None:
        if lost <= self.cfg.ip_lost_max or packets <= 0:
            return
        ratio = lost / packets
        if ratio > self.cfg.ip_lost_ratio_max:
            self.add("link", self.net_severity, f"ip-lost-{direction}", f"{self.node}: {lost} of {packets} IPv4 "
                     f"packets {what} during the run ({ratio:.2%})", direction=direction, lost=lost,
                     packets=packets, ratio=ratio)

    def qdisc(self, before: Mapping[str, Any] | None, after: Mapping[str, Any] | None) -> None:
        a, b = _source(after, "qdisc"), _source(before, "qdisc")
        if a is None or b is None:
            return
        prior = {q.get("key"): q for q in b.get("qdiscs", [])}
        for q in a.get("qdiscs", []):
            pq = prior.get(q.get("key"))
            if pq is None:
                continue
            label = f"{q.get('dev')}-{q.get('kind')}-{q.get('handle')}"
            d = self.delta(f"qdisc {q.get('key')} drops", f"{label}-drops", pq.get("drops"), q.get("drops"))
            if d is not None and d > self.cfg.qdisc_drop_max:
                self.add("link", self.net_severity, f"{q.get('dev')}-qdisc-drops", f"{self.node}: qdisc {q.get('kind')} "
                         f"on {q.get('dev')} ({q.get('key')}) dropped {pq.get('drops')} -> {q.get('drops')} (+{d})",
                         key=q.get("key"), delta=d)

    def infiniband(self, before: Mapping[str, Any] | None, after: Mapping[str, Any] | None) -> None:
        a = _source(after, "infiniband")
        if a is None:
            return
        prior = {f"{p.get('device')}-{p.get('port')}": p for p in (_source(before, "infiniband") or {}).get("ports", [])}
        for port in a.get("ports", []):
            name = f"{port.get('device')}-{port.get('port')}"
            pb = prior.get(name)
            state = port.get("state")
            if state is not None and state != "ACTIVE":
                was_active = pb is None or pb.get("state") == "ACTIVE"
                # Down now but up before (or no before): the run saw it go. Down in both: the node's state.
                sev = Nagios.CRITICAL if was_active else Nagios.WARNING
                self.add("link", sev, f"{name}-{state}", f"{self.node}: IB port {name} is {state} "
                         f"(phys {port.get('phys_state')}; before: {pb.get('state') if pb else 'no snapshot'})",
                         port=name, state=state, before=pb.get("state") if pb else None)
            if self.cfg.ib_rate_gbps is not None and port.get("rate_gbps") is not None \
                    and port.get("link_layer") in (None, "InfiniBand") and state == "ACTIVE" \
                    and port["rate_gbps"] < self.cfg.ib_rate_gbps:
                sev = Nagios.CRITICAL if self.cfg.ib_rate_severity == "critical" else Nagios.WARNING
                self.add("topology", sev, f"{name}-rate-{port['rate_gbps']:g}", f"{self.node}: IB port {name} "
                         f"runs at {port['rate_gbps']:g} Gb/s ({port.get('width')}), expected "
                         f"{self.cfg.ib_rate_gbps:g}", port=name, rate_gbps=port["rate_gbps"],
                         expected=self.cfg.ib_rate_gbps)
            if pb is None:
                continue
            ca, cb = port.get("counters", {}), pb.get("counters", {})
            for counter in IB_ERROR_COUNTERS + IB_OTHER_ERROR_COUNTERS:
                d = self.delta(f"IB {name} {counter}", f"{name}-{counter}", cb.get(counter), ca.get(counter))
                if d is None or d <= (self.cfg.ib_error_max if counter in IB_ERROR_COUNTERS else 0):
                    continue
                sev = Nagios.CRITICAL if counter in IB_ERROR_COUNTERS else Nagios.WARNING
                self.add("link", sev, f"{name}-{counter}", f"{self.node}: IB port {name} {counter} "
                         f"{cb.get(counter)} -> {ca.get(counter)} (+{d})", port=name, counter=counter,
                         before=cb.get(counter), after=ca.get(counter))


def judge_node(node: str, before: Mapping[str, Any] | None, after: Mapping[str, Any] | None,
               cfg: HealthConfig) -> list[HealthFinding]:
    """Every finding for one node's snapshot pair. Without both snapshots the node is UNKNOWN (a missing
    snapshot is not a pass); absolute rules still run on whatever after-snapshot exists."""
    j = _Judge(node, cfg)
    if before is None or after is None:
        missing = [ph for ph, s in (("before", before), ("after", after)) if s is None]
        j.add("unavailable", Nagios.UNKNOWN, "snapshot-missing", f"{node}: no {' or '.join(missing)} health "
              "snapshot", missing=missing)
    j.unavailable(before, after)
    j.xid(before, after)
    j.gpus(before, after)
    j.net(before, after)
    j.tcp(before, after)
    j.ip(before, after)
    j.qdisc(before, after)
    j.infiniband(before, after)
    return j.out


def judge_job(snapshots: Mapping[str, Mapping[str, Mapping[str, Any]]], cfg: HealthConfig,
              nodes: Iterable[str]) -> list[HealthFinding]:
    """Findings for every node of the job (`nodes`: the job's node list; a node with no snapshot at all is
    UNKNOWN). `snapshots`: load_snapshots' {node: {phase: snapshot}}."""
    out: list[HealthFinding] = []
    for node in nodes:
        phases = snapshots.get(node, {})
        out.extend(judge_node(node, phases.get("before"), phases.get("after"), cfg))
    return demote_symptoms(out)


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


def judge_dcgm(node: str, results: Sequence[DcgmResult]) -> list[HealthFinding]:
    """dcgmi diag results: fail -> CRITICAL, warn -> WARNING (skip and not-run are not judged here: a caller
    that needs a test run checks for it)."""
    out: list[HealthFinding] = []
    for r in results:
        if r.status not in ("fail", "warn"):
            continue
        sev = Nagios.CRITICAL if r.status == "fail" else Nagios.WARNING
        where = f"GPU {r.gpu}" if r.gpu is not None else "all GPUs"
        msg = "; ".join(r.messages)[:300]
        out.append(HealthFinding(node, "dcgm", sev, r.test, f"{node}: dcgmi diag {r.category}/{r.test} "
                                 f"{r.status} on {where}" + (f": {msg}" if msg else ""),
                                 {"category": r.category, "test": r.test, "gpu": r.gpu, "status": r.status,
                                  "messages": list(r.messages)}))
    return out
