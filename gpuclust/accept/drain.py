"""Close the loop with the scheduler: drain the nodes an acceptance report fails, resume the ones gpuclust
itself drained once they pass again, and never touch a drain someone else set (the rule NHC follows).

Ownership is the drain reason: every drain gpuclust sets has a reason in a stable taxonomy that admins and
NHC-style scripts can grep, `gpuclust:<class>:<detail> job <id> (<kind>): <message>`, e.g.
`gpuclust:remap:pending job 41 (allreduce): node3: GPU 2 row remap pending` or
`gpuclust:bandwidth:outlier job 22 (pairwise): slow node: ...`. <class> is one of CLASSES; <detail> is
[a-z0-9._-]+. Drains in the earlier form `gpuclust accept: <check> job ...` are still gpuclust's own. A drained
node whose reason starts otherwise (an admin's `disk`, NHC's `NHC: ...`) is somebody else's: it is listed as
untouched and never resumed or re-drained. When a node has several CRITICAL findings, the reason names the
cause before the symptom: a hardware-health class before gres, gres before bandwidth. Resume needs evidence newer than the drain: the node's latest judged result must have finished
after the time Slurm recorded for the drain reason, and carry no CRITICAL finding.

A drained node cannot run the next acceptance job, so `retest` (used by `gpuclust accept submit
--retest-drained`) lets the acceptance job onto gpuclust's own drained nodes: the job is submitted first,
the nodes are resumed until it starts, then drained again with the same reason while it runs, so the next
`accept report --drain` resumes them only on that job's pass.

Every scontrol call goes through the Slurm edge (SlurmClient.scontrol, argv lists); node names and reasons
are validated before they reach it.
"""

from __future__ import annotations

import re
import shlex
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpuclust.accept.health.kit import DRAIN_ORDER
from gpuclust.accept.report import Finding, Report
from gpuclust.errors import UnsafeValueError
from gpuclust.exitcodes import Nagios
from gpuclust.output import terminal_lines
from gpuclust.slurm.client import SlurmClient
from gpuclust.slurm.records import NodeRecord, parse_nodes_text

REASON_PREFIX = "gpuclust:"
LEGACY_REASON_PREFIX = "gpuclust accept:"  # drains set before the taxonomy: still ours
OWN_PREFIXES = (REASON_PREFIX, LEGACY_REASON_PREFIX)
# The drain classes, cause first: the order also picks which CRITICAL finding names a node's drain. The health
# classes (gres last) come from the health kit, which refuses a CRITICAL finding of a class not among them.
CLASSES = (*DRAIN_ORDER, "bandwidth", "retest")
_ACTION = re.compile(r"[A-Z][A-Z0-9_]{1,47}")
_DETAIL = re.compile(r"[a-z0-9][a-z0-9._-]{0,47}")
MAX_REASON = 240  # long enough for check, job and a short message; scontrol shows it whole
DEFAULT_MAX_DRAIN_FRACTION = 0.5
_NODE_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.\-]{0,127}")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]+")


def valid_node_name(name: str) -> str:
    """One plain node name (no hostlist expression, no leading '-', nothing scontrol would read as syntax)."""
    if not isinstance(name, str) or not _NODE_NAME.fullmatch(name):
        raise UnsafeValueError(f"node name {name!r} is not a plain Slurm node name (letters, digits, '_', '.', '-'); "
                               "give one node's name as `sinfo -N` prints it")
    return name


def reason_class(finding: Finding) -> tuple[str, str]:
    """(class, detail) of a finding: a health finding's own (check health-<class>); gres and topology by name;
    every bandwidth judgement (gate, outlier, baseline, drift) is `bandwidth` with the check as its detail."""
    if finding.check.startswith("health-"):
        cls = str(finding.details.get("class") or finding.check.removeprefix("health-"))
        return cls, str(finding.details.get("detail") or "unknown")
    if finding.check in ("gres", "topology", "retest"):
        return finding.check, "count" if finding.check == "gres" else finding.check
    return "bandwidth", finding.check


def finding_action(finding: Finding) -> str | None:
    """The action a health finding carries (details["action"]), for the drain reason."""
    action = finding.details.get("action") if finding.check.startswith("health-") else None
    return action if isinstance(action, str) and _ACTION.fullmatch(action) else None


def _cause_rank(finding: Finding) -> int:
    cls, _ = reason_class(finding)
    return CLASSES.index(cls) if cls in CLASSES else len(CLASSES)


def make_reason(cls: str, detail: str, job_id: str | None, kind: str | None, message: str,
                action: str | None = None) -> str:
    """`gpuclust:remap:pending RESET_GPU job 12 (allreduce): ...`, one line, at most MAX_REASON characters. The
    action (NVIDIA's Xid catalog bucket, or gpuclust's per class: gpuclust.accept.health.actions) follows the
    class and detail when the finding has one."""
    if cls not in CLASSES:
        raise UnsafeValueError(f"drain class {cls!r} is not one of {', '.join(CLASSES)}")
    detail = re.sub(r"[^a-z0-9._-]+", "-", detail.lower()).strip("-")[:48] or "unknown"
    if not _DETAIL.fullmatch(detail):
        raise UnsafeValueError(f"drain detail {detail!r} must match {_DETAIL.pattern}")
    if action is not None and not _ACTION.fullmatch(action):
        raise UnsafeValueError(f"drain action {action!r} must match {_ACTION.pattern}")
    head = (f"{REASON_PREFIX}{cls}:{detail}" + (f" {action}" if action else "") + (f" job {job_id}" if job_id else "")
            + (f" ({kind})" if kind else ""))
    text = f"{head}: {' '.join(_CONTROL.sub(' ', message).split())}"
    return valid_reason(text if len(text) <= MAX_REASON else text[: MAX_REASON - 3] + "...")


def valid_reason(reason: str) -> str:
    if not reason.startswith(OWN_PREFIXES):
        raise UnsafeValueError(f"drain reason must start with {REASON_PREFIX!r}: {reason!r}")
    if _CONTROL.search(reason) or len(reason) > MAX_REASON:
        raise UnsafeValueError(f"drain reason must be one line of at most {MAX_REASON} characters: {reason!r}")
    return reason


def is_ours(node: NodeRecord) -> bool:
    return node.is_drain and (node.reason or "").startswith(OWN_PREFIXES)


def drain_args(node: str, reason: str) -> list[str]:
    return ["update", f"NodeName={valid_node_name(node)}", "State=DRAIN", f"Reason={valid_reason(reason)}"]


def resume_args(node: str) -> list[str]:
    return ["update", f"NodeName={valid_node_name(node)}", "State=RESUME"]


def read_nodes(client: SlurmClient, names: Iterable[str] | None = None) -> dict[str, NodeRecord]:
    """`scontrol -o show node [NAME,...]` -> {name: NodeRecord} (state, full reason, who and when)."""
    wanted = sorted({valid_node_name(n) for n in names}) if names is not None else None
    if wanted == []:
        return {}
    args = ["-o", "show", "node"] + ([",".join(wanted)] if wanted else [])
    return {n.name: n for n in parse_nodes_text(client.scontrol(args))}


# ---- plan ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Action:
    """What the plan does with one node (drain, resume, keep, untouched or skip), why, and the drain reason."""

    node: str
    action: str  # drain | resume | keep (ours, still failing or no new result) | untouched (someone else's) | skip
    why: str
    reason: str | None = None  # the drain reason to set (drain) or the one in place

    def scontrol_args(self) -> list[str] | None:
        if self.action == "drain":
            assert self.reason is not None
            return drain_args(self.node, self.reason)
        if self.action == "resume":
            return resume_args(self.node)
        return None

    def as_dict(self) -> dict[str, Any]:
        args = self.scontrol_args()
        return {"node": self.node, "action": self.action, "why": self.why, "reason": self.reason,
                "command": shlex.join(["scontrol", *args]) if args else None}


@dataclass
class DrainPlan:
    """Every node's action and the notes; once applied, the scontrol commands run and the errors."""

    actions: list[Action] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    applied: list[str] = field(default_factory=list)  # the commands run (shell-quoted), in order
    errors: list[str] = field(default_factory=list)

    def of(self, action: str) -> list[str]:
        return [a.node for a in self.actions if a.action == action]

    def commands(self) -> list[str]:
        return [shlex.join(["scontrol", *args]) for a in self.actions if (args := a.scontrol_args())]

    def as_dict(self) -> dict[str, Any]:
        return {"actions": [a.as_dict() for a in self.actions], "notes": self.notes, "applied": self.applied,
                "errors": self.errors}


def first_critical(findings: Sequence[Finding]) -> Finding | None:
    """The CRITICAL finding that names the drain: the cause (hardware health) before the symptom (bandwidth)."""
    critical = [f for f in findings if f.status == Nagios.CRITICAL]
    return min(critical, key=_cause_rank) if critical else None


def plan(report: Report, nodes: dict[str, NodeRecord],
         max_fraction: float = DEFAULT_MAX_DRAIN_FRACTION) -> DrainPlan:
    """What --drain does for this report, given the nodes' Slurm state now. Pure: no Slurm calls."""
    out = DrainPlan()
    if report.status == Nagios.UNKNOWN and not report.nodes:
        out.notes.append("nothing judged (report UNKNOWN): no node drained or resumed")
        return out
    to_drain: list[Action] = []
    for name, verdict in sorted(report.nodes.items()):
        node = nodes.get(name)
        if node is None:
            out.actions.append(Action(name, "skip", "not a node Slurm knows (scontrol show node)"))
            continue
        bad = first_critical(verdict.findings)
        if node.is_drain and not is_ours(node):
            out.actions.append(Action(name, "untouched", f"drained by someone else ({node.reason_user or '?'}); "
                                                         "gpuclust never touches another's drain", node.reason))
        elif bad is not None:
            reason = make_reason(*reason_class(bad), bad.job_id, bad.kind, bad.message, finding_action(bad))
            if node.is_drain:
                out.actions.append(Action(name, "keep", "already drained by gpuclust and still failing", node.reason))
            else:
                to_drain.append(Action(name, "drain", f"{verdict.status.name}: [{bad.check}] failed", reason))
        elif node.is_drain:  # ours, and no CRITICAL finding in this report
            since = node.reason_time
            last = verdict.last_finished
            if since is not None and (last is None or last <= since):
                out.actions.append(Action(name, "keep", f"drained at {since.isoformat()}; no result since "
                                                        "(the latest judged one is older)", node.reason))
            else:
                out.actions.append(Action(name, "resume", f"passed again (latest result {last.isoformat() if last else '?'}"
                                                          f", status {verdict.status.name})", node.reason))
    limit = int(len(report.nodes) * max_fraction)
    if to_drain and len(to_drain) > max(limit, 1):
        out.notes.append(f"{len(to_drain)} of {len(report.nodes)} judged nodes failed, more than the "
                         f"--max-drain {max_fraction:.0%}: drained none (a fault that wide is not the nodes'; "
                         "look at the fabric or the gates)")
        out.actions.extend(Action(a.node, "skip", f"not drained: {a.why} (over --max-drain)", a.reason)
                           for a in to_drain)
    else:
        out.actions.extend(to_drain)
    out.actions.sort(key=lambda a: a.node)
    return out


def apply(client: SlurmClient, drain_plan: DrainPlan) -> DrainPlan:
    """Run the plan's scontrol commands. Each resume re-reads the node first and goes ahead only if the drain
    is still gpuclust's (an admin may have re-drained it meanwhile). A failed command is recorded and the rest
    still run; the caller decides the exit code from `errors`."""
    from gpuclust.errors import SlurmError

    for action in drain_plan.actions:
        args = action.scontrol_args()
        if args is None:
            continue
        if action.action == "resume":
            now = read_nodes(client, [action.node]).get(action.node)
            if now is None or not is_ours(now):
                drain_plan.notes.append(f"{action.node}: not resumed, its drain is no longer gpuclust's "
                                        f"(reason now {now.reason if now else None!r})")
                continue
        try:
            client.scontrol(args)
            drain_plan.applied.append(shlex.join(["scontrol", *args]))
        except SlurmError as exc:
            drain_plan.errors.append(f"{action.node}: {exc}")
    return drain_plan


def render(drain_plan: DrainPlan, dry_run: bool) -> str:
    lines = []
    for a in drain_plan.actions:
        lines.append(f"{a.action:9} {a.node}: {a.why}" + (f" [{a.reason}]" if a.reason and a.action != "drain" else ""))
    lines.extend(f"note: {n}" for n in drain_plan.notes)
    if dry_run:
        lines.extend(drain_plan.commands() or ["(no scontrol command)"])
    else:
        lines.extend(f"ran: {c}" for c in drain_plan.applied)
    lines.extend(f"error: {e}" for e in drain_plan.errors)
    return terminal_lines(lines)


# ---- re-test of gpuclust's own drained nodes -----------------------------------------------------------


def own_drained(client: SlurmClient, partition: str) -> dict[str, NodeRecord]:
    """gpuclust's own drained nodes in a partition."""
    return {n.name: n for n in read_nodes(client).values() if is_ours(n) and partition in n.partitions}


def retest(client: SlurmClient, drained: dict[str, NodeRecord], job_ids: Sequence[str], *,
           timeout_s: float = 120.0, poll_s: float = 0.5,
           sleep: Callable[[float], None] = time.sleep, clock: Callable[[], float] = time.monotonic) -> list[str]:
    """Let already-submitted acceptance jobs onto gpuclust's drained nodes: resume them, wait until every job
    has left PENDING, drain them again with the same reason (the job keeps running; the node shows DRAINING
    until it ends). Returns notes. The nodes are re-drained even when the wait times out or fails."""
    notes: list[str] = []
    if not drained:
        return notes
    for name in drained:
        client.scontrol(resume_args(name))
    notes.append(f"resumed {','.join(sorted(drained))} for job(s) {','.join(job_ids)}")
    try:
        deadline = clock() + timeout_s
        pending = list(job_ids)
        while pending and clock() < deadline:
            pending = [j for j in pending if _job_state(client, j) in ("PENDING", "CONFIGURING")]
            if pending:
                sleep(poll_s)
        if pending:
            notes.append(f"job(s) {','.join(pending)} still pending after {timeout_s:.0f} s; nodes drained again")
    finally:
        for name, node in sorted(drained.items()):
            reason = node.reason or make_reason("retest", "retest", None, None, "re-test")
            client.scontrol(drain_args(name, reason))
        notes.append(f"drained {','.join(sorted(drained))} again (same reasons) while the job(s) run")
    return notes


def _job_state(client: SlurmClient, job_id: str) -> str:
    if not re.fullmatch(r"[0-9]+(?:_[0-9]+)?", job_id):
        raise UnsafeValueError(f"bad job id {job_id!r}")
    from gpuclust.slurm.parse import parse_scontrol_oneliners

    recs = parse_scontrol_oneliners(client.scontrol(["-o", "show", "job", job_id]))
    return recs[0].get("JobState", "UNKNOWN") if recs else "UNKNOWN"


# ---- one node's acceptance status (the NHC check) ------------------------------------------------------


@dataclass(frozen=True)
class NodeStatus:
    """One node's acceptance status for the NHC check (OK, FAILED, STALE or NONE), its message and jobs."""

    node: str
    status: str  # OK | FAILED | STALE | NONE
    message: str
    jobs: tuple[str, ...] = ()
    last_finished: str | None = None

    @property
    def ok(self) -> bool:
        return self.status == "OK"

    def as_dict(self) -> dict[str, Any]:
        return {"node": self.node, "status": self.status, "message": self.message, "jobs": list(self.jobs),
                "last_finished": self.last_finished}


def node_status(scan: Any, config: Any, node: str, now: Any, stale_days: int | None = None) -> NodeStatus:
    """The node's latest result of each kind, judged by `accept report`'s own judgement: FAILED when any has a
    CRITICAL finding for the node, STALE when the newest is older than stale_days ([site]
    acceptance_stale_days), NONE when the node never ran one, OK otherwise."""
    from gpuclust.accept import report as rep
    from gpuclust.accept.results import JobResult, format_time

    valid_node_name(node)
    days = stale_days if stale_days is not None else config.acceptance_stale_days
    latest: dict[str, JobResult] = {}
    for job in scan.jobs:
        if node in job.nodes and (job.kind not in latest or job.job.finished >= latest[job.kind].job.finished):
            latest[job.kind] = job
    if not latest:
        return NodeStatus(node, "NONE", f"{node}: no acceptance result in {config.results_dir or 'the results dir'}")
    failed: list[str] = []
    for job in sorted(latest.values(), key=lambda j: j.job.finished):
        verdict = rep.evaluate(scan, config, job=job.job_id).nodes.get(node)
        bad = first_critical(verdict.findings) if verdict else None
        if bad is not None:
            failed.append(f"{job.kind} job {job.job_id}: [{bad.check}] {bad.message}")
    newest = max(j.job.finished for j in latest.values())
    jobs = tuple(f"{j.kind}-{j.job_id}" for j in sorted(latest.values(), key=lambda j: j.job.finished))
    age = now - newest
    if failed:
        return NodeStatus(node, "FAILED", f"{node}: last acceptance failed: " + "; ".join(failed), jobs,
                          format_time(newest))
    if age.total_seconds() > days * 86400:
        return NodeStatus(node, "STALE", f"{node}: last acceptance {age.days}d ago, stale after {days}d", jobs,
                          format_time(newest))
    return NodeStatus(node, "OK", f"{node}: last acceptance passed ({', '.join(jobs)})", jobs, format_time(newest))
