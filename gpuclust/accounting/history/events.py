"""slurmdbd's node events (`sacctmgr show event`), the node inventory (`scontrol show node -o`) and the
gres/gpu line of `sreport cluster utilization`: fetched per UTC day by `report fetch`, kept as Slurm printed
them beside the job store, and parsed here for the capacity and idle split (gpuclust.accounting.figures.economics).

Recorded shapes (22.05, lab; see tests/data/economics/):

    $ sacctmgr show event -P format=Event,NodeName,Start,End,State,User,TRES,Reason Start=... End=...
    Event|NodeName|TimeStart|TimeEnd|State|User|TRES|Reason
    Cluster||2026-12-03T09:03:58|Unknown|||billing=32,...,gres/gpu:a100=4,gres/gpu:h100=8,gres/gpu=12,...|Cluster Registered TRES
    Node|node4|2026-12-03T09:06:28|Unknown|DRAIN|root(0)|billing=8,cpu=8,gres/gpu:a100=2,gres/gpu=2,mem=16000M|econ drain test

Start/End select the events that overlap the window; an event still open has End `Unknown`. A node event is
recorded while a node is down, drained (or draining) or failed; its TRES holds the node's GRES. Reason is
free text, so it is asked for last and may hold the delimiter.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from gpuclust.atomicfile import write_atomic
from gpuclust.errors import GpuclustError, InputError, Problem, SlurmOutputError
from gpuclust.slurm.client import SLURM_TIME_FORMAT, SlurmClient
from gpuclust.slurm.parse import (
    Gres,
    gpu_count,
    gpu_types,
    parse_scontrol_oneliners,
    parse_slurm_time,
    parse_tres,
)
from gpuclust.slurm.records import NodeRecord, node_from_scontrol

EVENT_FORMAT = ("Event", "NodeName", "Start", "End", "State", "User", "TRES", "Reason")
# sacctmgr prints Start/End as TimeStart/TimeEnd in its header.
_HEADER_ALIASES = {"TimeStart": "Start", "TimeEnd": "End"}
EVENTS_FILE = "events.txt"
NODES_FILE = "nodes.txt"
SREPORT_FILE = "sreport.txt"
# Written by `report fetch` before issue 16 (a second sacct call for the pending reasons); sacct's Reason is now a
# field of the job table (gpuclust.accounting.ingest.registry). A stored day that has the file still gets it read.
REASONS_FILE = "reasons.txt"
META_FILE = "meta.json"


def economics_dir(state_dir: str) -> Path:
    """Beside the job store: <state_dir>/economics/day=YYYY-MM-DD/{events.txt,nodes.txt,sreport.txt,refusals.json}."""
    return Path(state_dir) / "economics"


def day_dir(state_dir: str, day: date) -> Path:
    return economics_dir(state_dir) / f"day={day.isoformat()}"


@dataclass(frozen=True)
class NodeEvent:
    """One node event of `sacctmgr show event`: when the node was down, drained or failed, why, its GPUs."""

    node: str
    start: float  # epoch seconds
    end: float | None  # None: still open when read
    state: str
    reason: str
    user: str
    gpus: int
    gpu_types: dict[str, int] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {"node": self.node, "start": _iso(self.start), "end": None if self.end is None else _iso(self.end),
                "state": self.state, "reason": self.reason, "user": self.user, "gpus": self.gpus}


@dataclass(frozen=True)
class ClusterTres:
    """A `Cluster Registered TRES` event: the cluster's GPUs (total and by type) from start to end."""

    start: float
    end: float | None
    gpus: int
    gpu_types: dict[str, int] = field(default_factory=dict)


@dataclass
class Events:
    """What the stored days hold: node events, `Cluster Registered TRES` events, and the problems reading them."""

    nodes: list[NodeEvent] = field(default_factory=list)
    cluster: list[ClusterTres] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)


@dataclass(frozen=True)
class Node:
    """The unit economics' view of a node (gpuclust.slurm.records.NodeRecord, the one node model): its
    partitions in Slurm's order and its GPUs as capacity counts them."""

    name: str
    partitions: tuple[str, ...]
    gpus: int
    gpu_types: dict[str, int] = field(default_factory=dict)
    gres: tuple[Gres, ...] = ()  # its configured Gres: its layout in GPU-equivalents (gpuclust.slurm.gpushare)

    @classmethod
    def of(cls, record: NodeRecord) -> Node:
        gpus, types = record.capacity_gpus()
        return cls(record.name, record.partitions, gpus, types, tuple(record.gres))


def _iso(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def event_args(since: datetime, until: datetime) -> list[str]:
    return ["show", "event", "-P", "format=" + ",".join(EVENT_FORMAT),
            f"Start={since.astimezone(timezone.utc).strftime(SLURM_TIME_FORMAT)}",
            f"End={until.astimezone(timezone.utc).strftime(SLURM_TIME_FORMAT)}"]


def sreport_args(since: datetime, until: datetime) -> list[str]:
    return ["-P", "-n", "cluster", "utilization", "-T", "gres/gpu", "-t", "minutes",
            f"start={since.astimezone(timezone.utc).strftime(SLURM_TIME_FORMAT)}",
            f"end={until.astimezone(timezone.utc).strftime(SLURM_TIME_FORMAT)}"]


def _time(text: str, source: str, line: int) -> float | None:
    if text in ("", "Unknown", "None"):
        return None
    try:
        value = parse_slurm_time(text)
    except (SlurmOutputError, ValueError):
        value = None
    if value is None:
        raise InputError(Problem(source, line, f"bad event time {text!r}"))
    return value.timestamp()


# A byte that is no UTF-8, kept by the surrogateescape decoding of Slurm's output and of --events/--nodes files:
# in a name it matches nothing and cannot be written to report.json, so it is refused where it is found.
_NOT_UTF8 = re.compile("[\udc80-\udcff]")


def _not_utf8(value: str) -> str | None:
    """`value` as the bytes it was, for a message, when it holds a byte that is no UTF-8 (else None)."""
    return repr(value.encode("utf-8", "surrogateescape")) if _NOT_UTF8.search(value) else None


def parse_events(text: str, source: str = "sacctmgr show event") -> Events:
    """`sacctmgr show event -P` output (with its header) -> node and cluster events. Rows that cannot be read
    are problems (file:line), not errors: one bad row does not hide the rest."""
    out = Events()
    lines = text.splitlines()
    header: list[str] | None = None
    for lineno, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        cells = raw.split("|")
        if header is None:
            header = [_HEADER_ALIASES.get(c, c) for c in cells]
            missing = [f for f in ("Event", "NodeName", "Start", "End", "TRES") if f not in header]
            if missing:
                raise InputError(Problem(source, lineno, f"not a `sacctmgr show event -P` header: missing "
                                         f"{', '.join(missing)}; write it with `sacctmgr show event -P "
                                         "format=Event,NodeName,Start,End,State,User,TRES,Reason`"))
            continue
        if len(cells) > len(header) and header[-1] == "Reason":  # a '|' inside the free-text reason
            cells = [*cells[: len(header) - 1], "|".join(cells[len(header) - 1:])]
        if len(cells) != len(header):
            out.problems.append(Problem(source, lineno, f"{len(cells)} fields, the header has {len(header)}"))
            continue
        row = dict(zip(header, cells, strict=True))
        if "Reason" in row:  # free text an admin typed: its bad bytes become U+FFFD, the event stands
            row["Reason"] = _NOT_UTF8.sub("\ufffd", row["Reason"])
        bad = next(((k, b) for k, v in row.items() if (b := _not_utf8(v)) is not None), None)
        if bad is not None:
            out.problems.append(Problem(source, lineno, f"{bad[0]} {bad[1]} holds a byte that is not UTF-8 "
                                        "(sacctmgr writes UTF-8: fix the file or record it again)", bad[0]))
            continue
        try:
            start = _time(row["Start"], source, lineno)
            end = _time(row["End"], source, lineno)
            tres = parse_tres(row["TRES"])
            gpus, types = gpu_count(tres), gpu_types(tres)
        except (InputError, SlurmOutputError) as exc:
            out.problems.append(exc.problems[0] if isinstance(exc, InputError) and getattr(exc, "problems", None)
                                else Problem(source, lineno, str(exc)))
            continue
        if start is None:
            out.problems.append(Problem(source, lineno, "event without a start time"))
            continue
        kind = row["Event"].strip().lower()
        if kind == "cluster" or (kind == "" and not row["NodeName"]):
            out.cluster.append(ClusterTres(start, end, gpus, types))
        elif kind == "node" or row["NodeName"]:
            out.nodes.append(NodeEvent(row["NodeName"], start, end, row.get("State", ""), row.get("Reason", ""),
                                       row.get("User", ""), gpus, types))
    if header is None and text.strip():
        raise InputError(Problem(source, 1, "empty or headerless `sacctmgr show event` output; write it with `sacctmgr show "
                                 "event -P format=Event,NodeName,Start,End,State,User,TRES,Reason`"))
    return out


def parse_nodes(text: str, source: str = "scontrol show node -o") -> list[Node]:
    """`scontrol show node -o` -> each node's partitions and GPUs (Gres=gpu:h100:4, or CfgTRES gres/gpu)."""
    nodes: list[Node] = []
    for record in parse_scontrol_oneliners(text):
        name = record.get("NodeName")
        if not name:
            continue
        parts = tuple(p for p in record.get("Partitions", "").split(",") if p and p != "(null)")
        for key, value in (("NodeName", name), ("Partitions", ",".join(parts))):
            if (shown := _not_utf8(value)) is not None:
                raise InputError(Problem(source, None, f"node {name.encode('utf-8', 'surrogateescape')!r}: {key} "
                                         f"{shown} holds a byte that is not UTF-8 (scontrol writes UTF-8: fix the "
                                         "file or record it again)", key))
        try:
            nodes.append(Node.of(node_from_scontrol(record)))
        except SlurmOutputError as exc:
            raise InputError(Problem(source, None, f"node {name}: {exc}")) from None
    return nodes


@dataclass(frozen=True)
class SreportGpu:
    """`sreport cluster utilization -T gres/gpu -t minutes` for the period, in GPU-hours."""

    allocated: float
    down: float
    planned_down: float
    idle: float
    planned: float
    reported: float

    def as_dict(self) -> dict[str, float]:
        return {k: round(v, 6) for k, v in self.__dict__.items()}


def parse_sreport(text: str) -> SreportGpu | None:
    """The gres/gpu line of `sreport -P -n cluster utilization -T gres/gpu -t minutes` (minutes -> hours).
    Columns: Cluster|TRES Name|Allocated|Down|PLND Down|Idle|Planned|Reported (22.05; 'Reserved' in older)."""
    for line in text.splitlines():
        cells = line.split("|")
        if len(cells) >= 8 and cells[1] == "gres/gpu":
            try:
                minutes = [float(c) for c in cells[2:8]]
            except ValueError:
                return None
            return SreportGpu(*(m / 60.0 for m in minutes))
    return None


# ---- fetch and store -----------------------------------------------------------------------------------


NODES_ARGS = ("show", "node", "-o")


def day_event_args(day: date) -> list[str]:
    """The `sacctmgr` argv of the node events overlapping one UTC day."""
    since = datetime(day.year, day.month, day.day, tzinfo=timezone.utc)
    return event_args(since, since + timedelta(days=1))


def fetch_day(client: SlurmClient, state_dir: str, day: date, *, nodes_text: str | None = None,
              events_text: str | None = None) -> dict[str, Any]:
    """Read the events overlapping one UTC day, the node inventory and sreport's gres/gpu split, and keep them
    under economics_dir(state_dir)/day=DAY/ (each file replaced whole). Returns a summary for the fetch table.
    `nodes_text`, `events_text`: the inventory and the day's events the fetch already read (None: read here)."""
    if events_text is None:
        events_text = client.sacctmgr(day_event_args(day))
    parsed = parse_events(events_text, f"sacctmgr show event {day.isoformat()}")
    if nodes_text is None:
        nodes_text = client.scontrol(list(NODES_ARGS))
    sreport_text = ""
    run = getattr(client, "run", None)
    if run is not None:
        since = datetime(day.year, day.month, day.day, tzinfo=timezone.utc)
        try:
            sreport_text = run("sreport", sreport_args(since, since + timedelta(days=1))).stdout
        except (GpuclustError, ValueError):
            sreport_text = ""  # the cross-check is optional: the report says it is missing
    write_atomic(day_dir(state_dir, day) / SREPORT_FILE, sreport_text, make_parents=True)
    store_inventory(state_dir, day, nodes_text, events_text)  # (its fetched_at last: the day is whole)
    return {"node_events": len(parsed.nodes), "event_problems": len(parsed.problems)}


def store_inventory(state_dir: str, day: date, nodes_text: str | None, events_text: str | None = None) -> None:
    """Keep the node inventory `report fetch` read (and the day's node events, where it read them for the
    GPU-equivalents' layout check) beside the day, as fetch_day does, without the economics' sreport: a report
    of the day reads the node layout (the shares of shard and MPS jobs) from it. `nodes_text` None: not read, no
    inventory written (the events still are)."""
    target = day_dir(state_dir, day)
    if nodes_text is not None:
        write_atomic(target / NODES_FILE, nodes_text, make_parents=True)
    if events_text is not None:
        write_atomic(target / EVENTS_FILE, events_text, make_parents=True)
        fetched = datetime.now(timezone.utc).replace(microsecond=0)
        write_atomic(target / META_FILE, json.dumps({"fetched_at": fetched.isoformat()}), make_parents=True)


@dataclass
class EventSource:
    """What the capacity split reads: events, the node inventory and sreport's split, or None where absent
    (`missing` says which)."""

    events: Events | None
    nodes: list[Node] | None
    sreport: SreportGpu | None = None
    as_of: float | None = None  # when the events were read: an open event ends here (None: the period end)
    missing: list[str] = field(default_factory=list)
    source: str = ""
    sreport_window: tuple[float, float] | None = None  # what sreport covered (None: the period itself)
    # (JobIDRaw, Start epoch) -> the pending reason sacct kept, from an older store's reasons.txt or --reasons FILE;
    # wins over the job table's `reason` column where it has the row (None: only the column says)
    reasons: dict[tuple[int, float], str] | None = None


def parse_reasons(text: str) -> dict[tuple[int, float], str]:
    """`sacct -a -D -X -P -n -o JobIDRaw,Start,Reason` -> {(JobIDRaw, Start epoch): Reason}; rows that never
    started are skipped (no queue wait)."""
    out: dict[tuple[int, float], str] = {}
    for line in text.splitlines():
        cells = line.split("|")
        if len(cells) != 3 or not cells[0].isdigit():
            continue
        try:
            start = parse_slurm_time(cells[1])
        except (SlurmOutputError, ValueError):
            continue
        if start is not None:
            out[(int(cells[0]), start.timestamp())] = cells[2]
    return out


def load_stored(state_dir: str, days: list[date]) -> EventSource:
    """The stored events of `days` (one event once: an event seen by several days, in the state the latest
    fetch saw), the latest inventory, and sreport per day summed."""
    events = Events()
    nodes: list[Node] | None = None
    missing: list[str] = []
    sreport_days: list[SreportGpu] = []
    reasons: dict[tuple[int, float], str] | None = None
    as_of: float | None = None
    seen: dict[tuple[str, float, str], tuple[float, NodeEvent]] = {}
    cluster_seen: dict[float, tuple[float, ClusterTres]] = {}
    for day in days:
        target = day_dir(state_dir, day)
        if not (target / EVENTS_FILE).exists():
            missing.append(day.isoformat())
            continue
        meta = json.loads((target / META_FILE).read_text(encoding="utf-8")) if (target / META_FILE).exists() else {}
        fetched = datetime.fromisoformat(meta["fetched_at"]).timestamp() if "fetched_at" in meta else 0.0
        parsed = parse_events((target / EVENTS_FILE).read_text(encoding="utf-8"), str(target / EVENTS_FILE))
        events.problems += parsed.problems
        for ev in parsed.nodes:
            key = (ev.node, ev.start, ev.state)
            if key not in seen or seen[key][0] <= fetched:
                seen[key] = (fetched, ev)
        for ct in parsed.cluster:
            if ct.start not in cluster_seen or cluster_seen[ct.start][0] <= fetched:
                cluster_seen[ct.start] = (fetched, ct)
        if (target / NODES_FILE).exists():
            nodes = parse_nodes((target / NODES_FILE).read_text(encoding="utf-8"), str(target / NODES_FILE))
        sr = parse_sreport((target / SREPORT_FILE).read_text(encoding="utf-8")) if (target / SREPORT_FILE).exists() \
            else None
        if sr is not None:
            sreport_days.append(sr)
        if (target / REASONS_FILE).exists():
            reasons = {**(reasons or {}), **parse_reasons((target / REASONS_FILE).read_text(encoding="utf-8"))}
        as_of = max(as_of or 0.0, fetched) if fetched else as_of
    events.nodes = [ev for _, ev in seen.values()]
    events.cluster = [ct for _, ct in cluster_seen.values()]
    sreport = None
    if sreport_days and len(sreport_days) == len(days) - len(missing):
        sreport = SreportGpu(*(sum(getattr(s, f) for s in sreport_days) for f in SreportGpu.__dataclass_fields__))
    if missing and len(missing) == len(days):
        return EventSource(None, nodes, None, None, missing, str(economics_dir(state_dir)), None, reasons)
    window = None
    if days:
        first = datetime(days[0].year, days[0].month, days[0].day, tzinfo=timezone.utc).timestamp()
        window = (first, datetime(days[-1].year, days[-1].month, days[-1].day, tzinfo=timezone.utc).timestamp() + 86400)
    return EventSource(events, nodes, sreport, as_of, missing, str(economics_dir(state_dir)), window, reasons)


def read_files(events_path: str | None, nodes_path: str | None, sreport_path: str | None = None,
               reasons_path: str | None = None) -> EventSource:
    """The offline form (`report build --input ... --events FILE --nodes FILE [--sreport FILE]`): files holding
    what `report fetch` would have read. A missing file leaves that part unknown."""
    def read(path: str) -> str:
        try:
            return Path(path).read_text(encoding="utf-8", errors="surrogateescape")
        except OSError as exc:
            raise InputError(Problem(path, None, f"cannot read: {exc.strerror or exc}")) from None

    missing = []
    events = parse_events(read(events_path), events_path) if events_path else None
    if events is None:
        missing.append("events")
    nodes = parse_nodes(read(nodes_path), nodes_path) if nodes_path else None
    if nodes_path and not nodes:  # (a binary file, another command's output: no node at all is never right)
        raise InputError(Problem(nodes_path, None, "no NodeName= record: expected `scontrol show node -o` output "
                                 "(one node per line); record it with `scontrol show node -o > FILE`"))
    if nodes is None:
        missing.append("nodes")
    sreport = parse_sreport(read(sreport_path)) if sreport_path else None
    reasons = parse_reasons(read(reasons_path)) if reasons_path else None
    return EventSource(events, nodes, sreport, None, missing, events_path or "", None, reasons)
