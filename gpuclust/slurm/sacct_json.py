"""``sacct --json``: one adapter per output shape, each turning a job object into the raw sacct fields the
text path reads (the same strings ``sacct --parsable2`` prints), so the accounting plane sees one record.

The shape comes from the document's ``meta`` block (gpuclust.slurm.jsonshape). Adapters exist only for
shapes recorded from a real Slurm in the lab (tests/data/accounting/<version>/); anything else is refused
with UnknownShape naming ``sacct --json``, the plugin and the version. The documented fallback is the text
form (``report fetch --via parsable``, the default), which every Slurm since 22.05 prints the same way.

Shapes:

* ``openapi/dbv0.0.38`` (Slurm 22.05): times are epoch integers (0 = unset); ``state.current`` a string;
  ``tres.allocated`` a list of {type, name, id, count}. ``exit_code.return_code`` is **0 for every job that
  exited normally, whatever its code** (a job that ran ``exit 3`` shows FAILED with return_code 0; the
  text ``ExitCode`` says ``3:0``): exit codes from this shape are unknown (``exit_code_known`` false).
* ``data_parser/v0.0.42`` (Slurm 24.11) and ``data_parser/v0.0.45`` (Slurm 26.05, same fields): numbers that may be
  unset are {set, infinite, number} objects (``time.limit``, ``array.task_id``, ``het.job_offset``,
  ``exit_code.return_code``, ``exit_code.signal.id``); ``state.current`` is a list (base state first); a
  job that never started has ``time.start`` 4294967294 (NO_VAL). Exit codes are right, FAILED jobs included
  (checked against the text ``ExitCode`` of the same jobs): ``exit_code_known`` true. A job killed by a
  signal has ``return_code`` unset and ``signal.id`` set (status SIGNALED): sacct's text prints ``0:15``.

A job object with a field that cannot be read (wrong type, a number out of range, a time past year 9999)
raises BadField; the reader rejects that row and reports it, never the whole document.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta, timezone
from typing import Any

from gpuclust.slurm.jsonshape import JsonShape, UnknownShape

COMMAND = "sacct --json"
NO_VAL = 4294967294
INFINITE = 4294967295
INT64_MAX = 2**63 - 1
MAX_EPOCH = 253402300799  # 9999-12-31T23:59:59Z: the last second a timestamp column can hold
MAX_ELAPSED_S = 100 * 366 * 86400
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


class BadField(ValueError):
    """One field of one job object cannot be read."""

    def __init__(self, field: str, message: str):
        self.field = field
        super().__init__(f"{field}: {message}")


# ---- value readers (shared by every shape) ----------------------------------------------------------------

def number(value: Any, field: str) -> int | None:
    """A plain integer or a data_parser {set, infinite, number} object -> int; None when null/unset/infinite."""
    if isinstance(value, Mapping):
        is_set, infinite = value.get("set", True), value.get("infinite", False)
        if not isinstance(is_set, bool) or not isinstance(infinite, bool):
            raise BadField(field, f"{dict(value)!r:.80} is not a {{set, infinite, number}} object")
        if not is_set or infinite:
            return None
        value = value.get("number")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise BadField(field, f"{value!r:.60} is not an integer")
    if not -INT64_MAX - 1 <= value <= INT64_MAX:
        raise BadField(field, f"{value} is out of range")
    return value


def count(value: Any, field: str) -> int | None:
    n = number(value, field)
    if n is not None and n < 0:
        raise BadField(field, f"{n} is negative")
    return n


def epoch(value: Any, field: str) -> str:
    """Epoch seconds -> the text sacct prints (SLURM_TIME_FORMAT pinned, UTC); 0/NO_VAL/INFINITE -> Unknown."""
    secs = number(value, field)
    if secs is None or secs in (0, NO_VAL, INFINITE):
        return "Unknown"
    if not 0 < secs <= MAX_EPOCH:
        raise BadField(field, f"{secs} is not a time (seconds since 1970 up to year 9999)")
    return (_EPOCH + timedelta(seconds=secs)).strftime("%Y-%m-%dT%H:%M:%S")


def elapsed(value: Any, field: str) -> str:
    secs = count(value, field) or 0
    if secs > MAX_ELAPSED_S:
        raise BadField(field, f"{secs} s is not a duration a job can have")
    days, rest = divmod(secs, 86400)
    text = f"{rest // 3600:02d}:{rest % 3600 // 60:02d}:{rest % 60:02d}"
    return f"{days}-{text}" if days else text


def text(value: Any, field: str) -> str:
    """A string field ('' for null). Numbers print as sacct would; objects and lists are refused."""
    if value is None:
        return ""
    if isinstance(value, bool) or isinstance(value, (Mapping, list)):
        raise BadField(field, f"{value!r:.60} is not a string")
    out = value if isinstance(value, str) else str(value)
    try:
        out.encode("utf-8")
    except UnicodeEncodeError:
        raise BadField(field, "is not valid Unicode (a lone surrogate escape)") from None
    return out


def obj(value: Any, field: str) -> Mapping[str, Any]:
    """A nested object ({} for null)."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise BadField(field, f"{value!r:.60} is not an object")
    return value


def tres_text(items: Any, field: str) -> str:
    """``tres.allocated`` -> the AllocTRES string sacct prints (``mem`` in MB gets its M)."""
    if items is None:
        return ""
    if not isinstance(items, list):
        raise BadField(field, f"{items!r:.60} is not a list")
    out = []
    for i, item in enumerate(items):
        where = f"{field}[{i}]"
        item = obj(item, where)
        kind, name = text(item.get("type"), f"{where}.type"), text(item.get("name"), f"{where}.name")
        n = number(item.get("count"), f"{where}.count")
        if kind == "energy" and n is not None and n < 0:  # 24.11 prints -2 for energy never measured
            continue
        if n is not None and n < 0:
            raise BadField(f"{where}.count", f"{n} is negative")
        if not kind or n is None:
            continue
        if "," in kind + name or "=" in kind + name:
            raise BadField(where, f"TRES name {kind}/{name!r} holds ',' or '='")
        key = f"{kind}/{name}" if name else kind
        out.append(f"{key}={n}M" if key == "mem" else f"{key}={n}")
    return ",".join(sorted(out))  # sacct's text prints the items sorted


# Usage TRES as the JSON gives them (raw counts) -> sacct's text: cpu in ms -> a clock; sizes stay bytes
# (the text reader takes a size without a suffix as bytes).
def usage_text(items: Any, field: str) -> str:
    """A step's ``tres.requested.average`` (etc.) list -> the TRESUsageIn* string sacct prints."""
    if items is None:
        return ""
    if not isinstance(items, list):
        raise BadField(field, f"{items!r:.60} is not a list")
    out = []
    for i, item in enumerate(items):
        where = f"{field}[{i}]"
        item = obj(item, where)
        kind, name = text(item.get("type"), f"{where}.type"), text(item.get("name"), f"{where}.name")
        n = number(item.get("count"), f"{where}.count")
        if not kind or n is None or n in (NO_VAL, INFINITE):
            continue
        if "," in kind + name or "=" in kind + name:
            raise BadField(where, f"TRES name {kind}/{name!r} holds ',' or '='")
        key = f"{kind}/{name}" if name else kind
        if key == "cpu" and n >= 0:
            secs, ms = divmod(n, 1000)
            out.append(f"cpu={secs // 3600:02d}:{secs % 3600 // 60:02d}:{secs % 60:02d}.{ms:03d}")
        else:
            out.append(f"{key}={n}")
    return ",".join(sorted(out))


def step_records(job: Mapping[str, Any], job_text_id: str) -> list[dict[str, str]]:
    """``jobs[].steps[]`` -> the step rows sacct's text would print (JobID ``<job>.<step>``, AllocTRES,
    Elapsed and the usage fields; the rest empty), so the usage rollup reads both front ends alike. Shapes:
    ``step.id`` is the step part (22.05: ``batch`` or 0) or the whole id (``123.batch``)."""
    steps = job.get("steps")
    if not isinstance(steps, list):
        return []
    out = []
    for i, step in enumerate(steps):
        where = f"steps[{i}]"
        step = obj(step, where)
        ident = obj(step.get("step"), f"{where}.step")
        sid = ident.get("id")
        sid_text = text(sid if sid is not None else ident.get("name"), f"{where}.step.id")
        if not sid_text:
            continue
        part = sid_text.rsplit(".", 1)[-1] if "." in sid_text else sid_text
        tres = obj(step.get("tres"), f"{where}.tres")
        requested = obj(tres.get("requested"), f"{where}.tres.requested")
        consumed = obj(tres.get("consumed"), f"{where}.tres.consumed")
        time_ = obj(step.get("time"), f"{where}.time")
        stats = obj(step.get("statistics"), f"{where}.statistics")
        energy = obj(stats.get("energy"), f"{where}.statistics.energy").get("consumed")
        joules = number(energy, f"{where}.statistics.energy.consumed")
        out.append({
            "JobID": f"{job_text_id}.{part}",
            "JobIDRaw": f"{job_text_id}.{part}",
            "Elapsed": elapsed(time_.get("elapsed"), f"{where}.time.elapsed"),
            "AllocTRES": tres_text(tres.get("allocated"), f"{where}.tres.allocated"),
            "TRESUsageInAve": usage_text(requested.get("average"), f"{where}.tres.requested.average"),
            "TRESUsageInMax": usage_text(requested.get("max"), f"{where}.tres.requested.max"),
            "TRESUsageInTot": usage_text(requested.get("total"), f"{where}.tres.requested.total"),
            "TRESUsageOutTot": usage_text(consumed.get("total"), f"{where}.tres.consumed.total"),
            "ConsumedEnergyRaw": "" if joules is None or joules < 0 or joules in (NO_VAL, INFINITE) else str(joules),
        })
    return out


# ---- adapters -------------------------------------------------------------------------------------------

class SacctJsonAdapter:
    """Base adapter: what every shape since 22.05 shares. Subclasses change what differs. The path of each
    plain field (and any per-shape override) is declared with the field, in gpuclust.accounting.registry;
    the adapters hold what is more than a path (State, ExitCode, the job id)."""

    plugins: tuple[str, ...] = ()
    exit_code_known = False
    note = ""

    def state(self, job: Mapping[str, Any]) -> str:
        raise NotImplementedError

    def exit_code(self, job: Mapping[str, Any]) -> tuple[str, bool]:
        return "", False

    def job_id(self, job: Mapping[str, Any]) -> tuple[str, str]:
        """(JobID as sacct prints it, JobIDRaw)."""
        raw = count(job.get("job_id"), "job_id")
        if raw is None or raw == 0:
            raise BadField("job_id", f"{job.get('job_id')!r:.40} is not a job id")
        array = obj(job.get("array"), "array")
        het = obj(job.get("het"), "het")
        task = count(array.get("task_id"), "array.task_id")
        pending = text(array.get("task"), "array.task")
        offset = count(het.get("job_offset"), "het.job_offset")
        if task is not None and task != NO_VAL:
            return f"{count(array.get('job_id'), 'array.job_id') or raw}_{task}", str(raw)
        if pending:
            return f"{count(array.get('job_id'), 'array.job_id') or raw}_[{pending}]", str(raw)
        if offset is not None and offset != NO_VAL:
            return f"{count(het.get('job_id'), 'het.job_id') or raw}+{offset}", str(raw)
        return str(raw), str(raw)


class OpenapiDbV0038(SacctJsonAdapter):
    """Slurm 22.05's ``sacct --json``."""

    plugins = ("openapi/dbv0.0.38",)
    exit_code_known = False
    note = (
        "Input is sacct --json from Slurm 22.05 (openapi/dbv0.0.38), which reports return code 0 for jobs that "
        "exited non-zero: exit codes are unknown (null) on this path. A run counts as completed when its last "
        "attempt is COMPLETED (Slurm sets COMPLETED only for exit code 0)."
    )

    def state(self, job: Mapping[str, Any]) -> str:
        state = obj(job.get("state"), "state")
        return text(state.get("current"), "state.current")


# The state flags Slurm's job_state_string() prints instead of the base state, in its order of precedence.
STATE_FLAGS_SHOWN = ("COMPLETING", "STAGE_OUT", "CONFIGURING", "RESIZING", "REQUEUED", "REQUEUE_FED",
                     "REQUEUE_HOLD", "SPECIAL_EXIT", "STOPPED", "REVOKED", "RESV_DEL_HOLD", "SIGNALING")


class DataParserV0042(SacctJsonAdapter):
    """Slurm 24.11's ``sacct --json`` (data_parser/v0.0.42)."""

    plugins = ("data_parser/v0.0.42",)
    exit_code_known = True

    def state(self, job: Mapping[str, Any]) -> str:
        """The base state and its flags (``["PENDING", "REQUEUED"]`` for a requeued execution) -> the one
        word sacct's text prints, by Slurm's own rule (job_state_string: these flags win over the base)."""
        state = obj(job.get("state"), "state")
        current = state.get("current")
        if not isinstance(current, list) or not current:
            raise BadField("state.current", f"{current!r:.60} is not a non-empty list")
        words = [text(word, f"state.current[{i}]") for i, word in enumerate(current)]
        for flag in STATE_FLAGS_SHOWN:
            if flag in words[1:]:
                return flag
        return words[0]

    def exit_code(self, job: Mapping[str, Any]) -> tuple[str, bool]:
        ec = obj(job.get("exit_code"), "exit_code")
        code = count(ec.get("return_code"), "exit_code.return_code")
        signal = obj(ec.get("signal"), "exit_code.signal")
        sig = count(signal.get("id"), "exit_code.signal.id")
        if code is None and sig is None:
            return "", False
        # A job killed by a signal has no return code set (status SIGNALED): sacct's text prints 0:<signal>.
        return f"{code or 0}:{sig or 0}", True


class DataParserV0045(DataParserV0042):
    """Slurm 26.05's ``sacct --json`` (data_parser/v0.0.45). The fields gpuclust reads are laid out as in
    v0.0.42 (checked row by row against the text output of the same jobs, tests/data/accounting/26.05); new
    are ``sluid``, ``exclusive``, ``oversubscribe``, ``segment_size``, and ``association.user``/``account``
    come empty (the top-level ``user``/``account`` are set, and are read first)."""

    plugins = ("data_parser/v0.0.45",)


ADAPTERS: tuple[type[SacctJsonAdapter], ...] = (OpenapiDbV0038, DataParserV0042, DataParserV0045)
KNOWN_PLUGINS: tuple[str, ...] = tuple(p for a in ADAPTERS for p in a.plugins)
FALLBACK_HINT = "Read sacct's text output instead (`report fetch --via parsable`, or a --parsable2 dump)"


def adapter_for(shape: JsonShape, command: str = COMMAND) -> SacctJsonAdapter:
    """The adapter for a document's shape; UnknownShape (naming command, plugin, version) for any other."""
    for adapter in ADAPTERS:
        if shape.plugin in adapter.plugins:
            return adapter()
    raise UnknownShape(command, shape, KNOWN_PLUGINS, FALLBACK_HINT)
