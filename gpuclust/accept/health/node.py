"""`gpuclust health check`: one node, now, quickly enough for Slurm's Prolog, Epilog and HealthCheckProgram and
for NHC. The same sources and rules as acceptance (gpuclust.accept.health.sources), judged between this check
and the node's previous one instead of before and after a run:

  nvidia_smi   `nvidia-smi -q -x` bounded by [health] check_nvidia_smi_timeout: pending row remaps and page
               retirements, uncorrectable ECC (aggregate, and volatile growth since the last check), PCIe below
               max, clocks held down, NVLink counters that grew, Fabric Manager's state, GPUs gone since the
               last check, a pending MIG mode change and MIG instances' ECC; and the number of GPUs against the
               node's GRES (class gres; a GPU in MIG mode counts its MIG devices, as the GRES does)
  xid          the kernel log's Xid lines not reported by an earlier check (journalctl -k, else dmesg)
  infiniband   each port's state and rate, error counters that grew since the last check

State (check_state_dir/<node>.json, written atomically): the boot it belongs to, the fingerprints of the Xid lines
already reported, and the last good snapshot of nvidia_smi and infiniband. A check reports an Xid line once: a
restart of slurmd, a re-run or a resumed node does not repeat the drain. What the kernel log does between two
checks cannot make it report an old line again or miss a new one:
  - rotation (the ring buffer wrapped, journald vacuumed): lines are matched by fingerprint, not position;
  - a clock jump backwards (now is before the last check): the whole boot's log is read, fingerprints decide;
  - a new boot (/proc/sys/kernel/random/boot_id changed): the old fingerprints and snapshot are dropped.

The node's state, one of STATES:
  pass       nothing CRITICAL (WARNING findings are printed and pass)
  fail       a CRITICAL finding: the drain reason is `gpuclust:<class>:<detail> <ACTION> ...` (cause first)
  unchecked  the check could not run: nvidia-smi missing or failing on a node with GPUs, a timeout, output that is
             no nvidia-smi document, the kernel log unreadable. Its reasons are named (UNCHECKED_REASONS). Never
             drained by the check; [health] check_unavailable says whether it exits as pass or fail
  no-gpu     the node's GRES has no GPU and there is no nvidia-smi: nothing to check, passes
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from gpuclust.accept.health.actions import in_catalog
from gpuclust.accept.health.kit import (
    DRAIN_ORDER,
    HealthFinding,
    HealthPaths,
    Judge,
    finding_action,
    guard,
    ok,
    run,
)
from gpuclust.accept.health.sources.infiniband import collect_infiniband, judge_infiniband
from gpuclust.accept.health.sources.nvidia_smi import collect_nvidia_smi, judge_nvidia_smi, visible_devices
from gpuclust.accept.health.sources.xid import judge_xid, parse_xid_lines
from gpuclust.atomicfile import write_atomic
from gpuclust.config.health import HealthConfig
from gpuclust.exitcodes import Nagios

STATE_SCHEMA = 1
STATES = ("pass", "fail", "unchecked", "no-gpu")
UNCHECKED_REASONS = ("no-nvidia-smi", "nvidia-smi-timeout", "nvidia-smi-error", "nvidia-smi-unreadable",
                     "kernel-log-unreadable", "no-config")
XID_WINDOW_MARGIN = timedelta(minutes=10)  # journal lines may land a little after the time they carry
MAX_SEEN = 2000  # fingerprints kept per node: far more Xid lines than one boot of a healthy node logs
MAX_STATE_BYTES = 16 * 1024 * 1024
_NODE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.\-]{0,127}")


@dataclass
class NodeCheck:
    """One node's `health check`: its state (STATES), findings, what went unchecked, and the state to save."""

    node: str
    state: str  # one of STATES
    findings: list[HealthFinding] = field(default_factory=list)
    unchecked: list[tuple[str, str]] = field(default_factory=list)  # (reason name, detail)
    notes: list[str] = field(default_factory=list)
    gres_gpus: int | None = None
    gpus_seen: int | None = None
    next_state: dict[str, Any] = field(default_factory=dict)  # what save_state writes
    new_xid: list[str] = field(default_factory=list)  # fingerprints first reported by this check

    @property
    def critical(self) -> list[HealthFinding]:
        return [f for f in self.findings if f.severity == Nagios.CRITICAL]

    @property
    def warning(self) -> bool:
        return any(f.severity == Nagios.WARNING for f in self.findings)

    def cause(self) -> HealthFinding | None:
        """The CRITICAL finding that names the drain: the cause before the symptom (kit.DRAIN_ORDER)."""
        crit = self.critical
        rank = {c: i for i, c in enumerate(DRAIN_ORDER)}
        return min(crit, key=lambda f: rank.get(f.cls, len(rank))) if crit else None

    def as_dict(self, cfg: HealthConfig | None = None) -> dict[str, Any]:
        return {"node": self.node, "state": self.state, "gres_gpus": self.gres_gpus, "gpus_seen": self.gpus_seen,
                "unchecked": [{"reason": r, "detail": d} for r, d in self.unchecked], "notes": self.notes,
                "findings": [{"class": f.cls, "severity": f.severity.name, "detail": f.detail, "message": f.message,
                              "action": finding_action(f, cfg), "evidence": f.evidence} for f in self.findings]}


def valid_node(node: str) -> str:
    if not _NODE.fullmatch(node or ""):
        raise ValueError(f"node name {node!r} is not a plain Slurm node name")
    return node


def state_path(state_dir: str | os.PathLike[str], node: str) -> Path:
    return Path(state_dir) / f"{valid_node(node)}.json"


def load_state(state_dir: str | os.PathLike[str], node: str) -> tuple[dict[str, Any], str | None]:
    """The node's state, or ({}, why) when there is none or it cannot be read (a fresh start, never a crash)."""
    path = state_path(state_dir, node)
    try:
        if path.stat().st_size > MAX_STATE_BYTES:
            return {}, f"{path}: larger than {MAX_STATE_BYTES >> 20} MiB, ignored"
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}, None
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as exc:
        return {}, f"{path}: unreadable ({type(exc).__name__}), starting afresh"
    if not isinstance(data, dict) or data.get("schema") != STATE_SCHEMA or data.get("node") != node:
        return {}, f"{path}: not this node's health-check state, starting afresh"
    return data, None


def save_state(state_dir: str | os.PathLike[str], node: str, data: Mapping[str, Any]) -> Path:
    return write_atomic(state_path(state_dir, node), json.dumps(data, sort_keys=True) + "\n", make_parents=True)


def boot_id(paths: HealthPaths) -> str | None:
    try:
        return Path(paths.proc, "sys", "kernel", "random", "boot_id").read_text(encoding="ascii").strip() or None
    except (OSError, UnicodeDecodeError):
        return None


def fingerprint(event: Mapping[str, Any]) -> str:
    """One Xid report, whichever reader printed it: its time to the second (UTC), GPU, code and message; an
    untimed line (plain dmesg) by its text."""
    when = _time(event.get("time")) if event.get("time") else None
    if when is not None:
        key = f"{when.astimezone(timezone.utc).replace(microsecond=0).isoformat()}|{event.get('pci')}|" \
              f"{event.get('code')}|{event.get('message')}"
    else:
        key = str(event.get("line", "")).strip()
    return hashlib.sha256(key.encode("utf-8", "surrogateescape")).hexdigest()[:20]


def _nvidia_reason(reason: str) -> str:
    if "not found on PATH" in reason or ": not found" in reason:
        return "no-nvidia-smi"
    if "timed out" in reason:
        return "nvidia-smi-timeout"
    if reason.startswith(("parse error", "unreadable output")):
        return "nvidia-smi-unreadable"
    return "nvidia-smi-error"


def _has_log_lines(text: str) -> bool:
    return any(line.strip() and not line.startswith(("-- ", "No journal files")) for line in text.splitlines())


def read_kernel_log(paths: HealthPaths, since: datetime | None, timeout: float) -> tuple[str, str]:
    """(text, command): journalctl -k (this boot; from `since` when given), else dmesg (no journal on this
    machine, or journalctl missing). Raises kit.Unavailable when neither answers."""
    from gpuclust.accept.health.kit import Unavailable

    argv = [paths.journalctl, "-k", "-o", "short-iso", "--no-pager"]
    if since is not None:
        argv += ["--since", since.astimezone().strftime("%Y-%m-%d %H:%M:%S")]
    journal: str | None = None
    first: Unavailable | None = None
    try:
        journal = run(argv, timeout)
    except Unavailable as exc:
        first = exc
    if journal is not None and _has_log_lines(journal):
        return journal, "journalctl"
    try:
        return run([paths.dmesg, "--time-format", "iso"], timeout), "dmesg"
    except Unavailable as second:
        if journal is not None:  # the journal answered, with nothing in the window; dmesg refused
            return journal, "journalctl"
        raise Unavailable(f"{first}; fallback {second}") from None


def check_node(node: str, cfg: HealthConfig, *, paths: HealthPaths | None = None,
               state_dir: str | os.PathLike[str] | None = None, gres_gpus: int | None = None,
               now: datetime | None = None, kernel_log_timeout: float = 10.0) -> NodeCheck:
    """Check this node now (see the module docstring). `gres_gpus`: the GPUs the node's GRES declares (None:
    unknown, not compared). Never raises for what the node answers; the state file is read, not written
    (save_state(check.next_state) after acting on the result)."""
    valid_node(node)
    paths = paths or HealthPaths.from_env()
    now = (now or datetime.now(timezone.utc)).astimezone(timezone.utc)
    directory = state_dir if state_dir is not None else cfg.check_state_dir
    prev, why = load_state(directory, node)
    out = NodeCheck(node, "pass", gres_gpus=gres_gpus)
    if why:
        out.notes.append(why)
    boot = boot_id(paths)
    same_boot = bool(prev) and boot is not None and prev.get("boot_id") == boot
    if prev and not same_boot:
        out.notes.append("new boot since the last check (or no boot id): earlier Xid lines and counters dropped")
    last_time = _time(prev.get("time")) if same_boot else None
    before_sources = prev.get("snapshot", {}) if same_boot and isinstance(prev.get("snapshot"), dict) else {}

    # -- collect
    nv = collect_nvidia_smi(paths, cfg.check_nvidia_smi_timeout_s)
    ib = collect_infiniband(paths)
    since = None
    if last_time is not None:
        if now < last_time:
            out.notes.append(f"clock went back ({last_time.isoformat()} -> {now.isoformat()}): the whole boot's "
                             "kernel log read, lines matched by fingerprint")
        else:
            since = last_time - XID_WINDOW_MARGIN
    seen = set(prev.get("xid_seen", [])) if same_boot and isinstance(prev.get("xid_seen"), list) else set()
    xid_entry, new_events = _collect_new_xid(paths, since, seen, kernel_log_timeout)

    # -- the check's own state
    nv_ok = nv.get("status") == "ok"
    # a GPU in MIG mode offers its MIG devices, as the node's GRES counts them (gpu:1g.10gb:7 is 7)
    gpus = visible_devices(nv) if nv_ok else None
    mig = nv_ok and any(str(g.get("mig_mode_current") or "").lower() == "enabled" for g in nv.get("gpus", []))
    out.gpus_seen = gpus
    if not nv_ok:
        reason = str(nv.get("reason", "unavailable"))
        name = _nvidia_reason(reason)
        if name == "no-nvidia-smi" and gres_gpus == 0:
            out.state = "no-gpu"
            out.notes.append("GRES declares no GPU and there is no nvidia-smi: nothing to check")
        else:
            out.unchecked.append((name, reason))
    if xid_entry.get("status") != "ok" and out.state != "no-gpu":
        out.unchecked.append(("kernel-log-unreadable", str(xid_entry.get("reason", "unavailable"))))

    # -- judge with the acceptance rules: the last check is "before", this one "after"
    j = Judge(node, cfg)
    if nv_ok:
        before_nv = before_sources.get("nvidia_smi")
        before = {"sources": {"nvidia_smi": before_nv}} if isinstance(before_nv, dict) else None
        judge_nvidia_smi(j, before, {"sources": {"nvidia_smi": nv}})
        if gres_gpus is not None and gpus is not None and gpus != gres_gpus:
            sev = Nagios.CRITICAL if gpus < gres_gpus else Nagios.WARNING
            what = "GPU(s) and MIG device(s)" if mig else "GPU(s)"
            j.add("gres", sev, "count", f"{node}: nvidia-smi lists {gpus} {what}, the node's GRES declares "
                  f"{gres_gpus}", gpus=gpus, gres=gres_gpus)
    if ib.get("status") == "ok":
        before_ib = before_sources.get("infiniband")
        judge_infiniband(j, {"sources": {"infiniband": before_ib}} if isinstance(before_ib, dict) else None,
                         {"sources": {"infiniband": ib}})
    if new_events:
        judge_xid(j, None, {"sources": {"xid": ok(command=xid_entry.get("command"), since=None,
                                                   events=new_events)}})
    out.findings = [_since_last_check(f) for f in j.out]
    out.new_xid = [fingerprint(ev) for ev in new_events]

    if out.critical:
        out.state = "fail"
    elif out.unchecked and out.state != "no-gpu":
        out.state = "unchecked"

    # -- what save_state writes next
    snapshot = dict(before_sources)
    for name, entry in (("nvidia_smi", nv), ("infiniband", ib)):
        if entry.get("status") == "ok":
            snapshot[name] = entry
    out.next_state = {"schema": STATE_SCHEMA, "node": node, "time": now.isoformat(), "boot_id": boot,
                      "xid_seen": sorted(seen)[-MAX_SEEN:], "snapshot": snapshot,
                      "last": {"state": out.state, "time": now.isoformat()}}
    return out


def commit_xid(check: NodeCheck) -> dict[str, Any]:
    """next_state with this check's new Xid lines marked as reported (call it once they were acted on: exit code
    given, or the node drained; a failed drain leaves them new, so the next check reports them again)."""
    data = dict(check.next_state)
    seen = list(dict.fromkeys([*data.get("xid_seen", []), *check.new_xid]))
    data["xid_seen"] = seen[-MAX_SEEN:]
    return data


def _time(value: Any) -> datetime | None:
    try:
        parsed = datetime.fromisoformat(str(value))
    except (TypeError, ValueError):
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=timezone.utc)


def _collect_new_xid(paths: HealthPaths, since: datetime | None, seen: set[str],
                     timeout: float) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The kernel log's Xid events whose line no earlier check reported."""
    def read() -> dict[str, Any]:
        text, command = read_kernel_log(paths, since, timeout)
        events = [{**ev.as_dict(), "timed": ev.time is not None}
                  for ev in parse_xid_lines(text, year_hint=datetime.now().year)]
        return ok(command=command, since=since.isoformat() if since else None, events=events)

    entry = guard(read)
    if entry.get("status") != "ok":
        return entry, []
    fresh: list[dict[str, Any]] = []
    taken: set[str] = set()
    for ev in entry.get("events", []):
        fp = fingerprint(ev)
        if fp in seen or fp in taken:
            continue
        taken.add(fp)
        fresh.append(ev)
    return entry, fresh


def _since_last_check(f: HealthFinding) -> HealthFinding:
    """The acceptance rules speak of "the run"; here the window is "since the last check". An Xid code NVIDIA's
    catalog does not list says so."""
    message = f.message.replace("during the run", "since the last check").replace(" after the run", "")
    evidence = f.evidence
    if f.cls == "xid" and isinstance(f.evidence.get("code"), int) and not in_catalog(f.evidence["code"]):
        message += " (an Xid NVIDIA's catalog does not list: CONTACT_SUPPORT)"
        evidence = {**f.evidence, "in_catalog": False}
    return replace(f, message=message, evidence=evidence)
