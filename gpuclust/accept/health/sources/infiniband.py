"""InfiniBand ports (source `infiniband`): /sys/class/infiniband/<dev>/ports/<n>/ (RoCE ports too).

    infiniband  {"ports": [{device, port, state, phys_state, rate_gbps, width, link_layer, counters}]}

Findings: `link` CRITICAL when an error counter (IB_ERROR_COUNTERS) grows by more than [health]
ib_error_max or a port that was ACTIVE went down (WARNING: down before the run too, or another error counter
grew); `topology` at ib_rate_severity for an active InfiniBand port below ib_rate_gbps; `vanished` CRITICAL
for a port (device/port) in the before snapshot and not in the after one (or none at all after the run:
/sys/class/infiniband gone with the driver).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from gpuclust.accept.health.kit import (
    HealthPaths,
    Judge,
    Snap,
    Source,
    bounded_int,
    checkable,
    guard,
    is_unknown,
    ok,
    read_sysfs,
    source_data,
    to_float,
    to_int,
)
from gpuclust.accept.health.shape import integer, list_of, map_of, number, obj, string
from gpuclust.exitcodes import Nagios

IB_ERROR_COUNTERS = ("symbol_error", "link_downed", "link_error_recovery", "port_rcv_errors")
IB_OTHER_ERROR_COUNTERS = ("excessive_buffer_overrun_errors", "local_link_integrity_errors",
                           "port_rcv_remote_physical_errors", "port_xmit_discards", "port_rcv_switch_relay_errors",
                           "port_rcv_constraint_errors", "port_xmit_constraint_errors", "VL15_dropped")


@dataclass(frozen=True)
class IbPort:
    """One InfiniBand (or RoCE) port: its state, rate, width, link layer and error counters."""

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
    if is_unknown(text):
        return None, None
    assert text is not None
    m = re.match(r"\s*(\d+)\s*:\s*(\S+)", text)
    if m:
        return bounded_int(m.group(1)), m.group(2)
    return None, text.strip() or None


def parse_ib_rate(text: str | None) -> tuple[float | None, str | None]:
    """'200 Gb/sec (4X HDR)' -> (200.0, '4X'); '40 Gb/sec (4X QDR)' -> (40.0, '4X')."""
    if is_unknown(text):
        return None, None
    assert text is not None
    m = re.match(r"\s*(\d+(?:\.\d+)?)\s*Gb/sec(?:\s*\((\d+X)[^)]*\))?", text)
    if not m:
        return None, None
    return to_float(m.group(1)), m.group(2)


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
        numbered = [(n, p) for p in pdir.iterdir() if (n := bounded_int(p.name)) is not None and p.name.isdigit()]
        for port_no, p in sorted(numbered, key=lambda np: np[0]):
            files = {n: read_sysfs(p / n) for n in ("state", "phys_state", "rate", "link_layer") if (p / n).is_file()}
            cdir = p / "counters"
            counters = {f.name: read_sysfs(f) for f in sorted(cdir.iterdir()) if f.is_file()} if cdir.is_dir() else {}
            ports.append(parse_ib_port(dev.name, port_no, files, counters))
    return ports


def collect_infiniband(paths: HealthPaths) -> dict[str, Any]:
    return guard(lambda: ok(ports=[port.as_dict() for port in read_infiniband(paths.sysfs)]))


def _vanished_ports(j: Judge, before: Snap, after: Snap) -> None:
    b = source_data(before, "infiniband")
    if b is None or not checkable(after, "infiniband"):
        return
    a = source_data(after, "infiniband")
    present = {(p.get("device"), p.get("port")) for p in (a or {}).get("ports", [])}
    for port in b.get("ports", []):
        dev, num_ = port.get("device"), port.get("port")
        if (dev, num_) in present:
            continue
        why = "not in the after snapshot" if a is not None else "no InfiniBand device at all after the run"
        j.add("vanished", Nagios.CRITICAL, f"ib-{dev}-{num_}", f"{j.node}: IB port {dev} port {num_} present "
              f"before the run, gone after it ({why})", device=dev, port=num_)


def judge_infiniband(j: Judge, before: Snap, after: Snap) -> None:
    _vanished_ports(j, before, after)
    a = source_data(after, "infiniband")
    if a is None:
        return
    prior = {f"{p.get('device')}-{p.get('port')}": p for p in (source_data(before, "infiniband") or {}).get("ports", [])}
    for port in a.get("ports", []):
        name = f"{port.get('device')}-{port.get('port')}"
        pb = prior.get(name)
        state = port.get("state")
        if state is not None and state != "ACTIVE":
            was_active = pb is None or pb.get("state") == "ACTIVE"
            # Down now but up before (or no before): the run saw it go. Down in both: the node's state.
            sev = Nagios.CRITICAL if was_active else Nagios.WARNING
            j.add("link", sev, f"{name}-{state}", f"{j.node}: IB port {name} is {state} "
                  f"(phys {port.get('phys_state')}; before: {pb.get('state') if pb else 'no snapshot'})",
                  port=name, state=state, before=pb.get("state") if pb else None)
        if j.cfg.ib_rate_gbps is not None and port.get("rate_gbps") is not None \
                and port.get("link_layer") in (None, "InfiniBand") and state == "ACTIVE" \
                and port["rate_gbps"] < j.cfg.ib_rate_gbps:
            sev = Nagios.CRITICAL if j.cfg.ib_rate_severity == "critical" else Nagios.WARNING
            j.add("topology", sev, f"{name}-rate-{port['rate_gbps']:g}", f"{j.node}: IB port {name} "
                  f"runs at {port['rate_gbps']:g} Gb/s ({port.get('width')}), expected "
                  f"{j.cfg.ib_rate_gbps:g}", port=name, rate_gbps=port["rate_gbps"],
                  expected=j.cfg.ib_rate_gbps)
        if pb is None:
            continue
        ca, cb = port.get("counters", {}), pb.get("counters", {})
        for counter in IB_ERROR_COUNTERS + IB_OTHER_ERROR_COUNTERS:
            d = j.delta(f"IB {name} {counter}", f"{name}-{counter}", cb.get(counter), ca.get(counter))
            if d is None or d <= (j.cfg.ib_error_max if counter in IB_ERROR_COUNTERS else 0):
                continue
            sev = Nagios.CRITICAL if counter in IB_ERROR_COUNTERS else Nagios.WARNING
            j.add("link", sev, f"{name}-{counter}", f"{j.node}: IB port {name} {counter} "
                  f"{cb.get(counter)} -> {ca.get(counter)} (+{d})", port=name, counter=counter,
                  before=cb.get(counter), after=ca.get(counter))


# The snapshot's data (SOURCE.shape): IbPort.as_dict() per port.
SHAPE = obj({"ports": list_of(obj({
    "device": string(), "port": integer(), "state": string(True), "phys_state": string(True),
    "rate_gbps": number(True), "width": string(True), "link_layer": string(True),
    "counters": map_of(integer(True))}, required=["device", "port"]))}, required=["ports"])

SOURCE = Source("infiniband", lambda r: collect_infiniband(r.paths), judge_infiniband, shape=SHAPE)
