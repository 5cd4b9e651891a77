"""``sacct --json``: one adapter per output shape, each turning a job object into the raw sacct fields the
text path reads (the same strings ``sacct --parsable2`` prints), so the accounting plane sees one record.

The shape comes from the document's ``meta`` block (gpuclust.slurm.jsonshape). The adapters are one table
(ADAPTER_TABLE): each entry names its plugin, the Slurm releases that ship it, what it was proven on, and only
how it differs; the path of each field is declared once, with the field, in gpuclust.accounting.ingest.registry.
Anything else (an unknown plugin, a missing or malformed meta, a plugin the named release does not ship) is
refused with UnknownShape naming ``sacct --json``, what meta says and the shapes read. The documented
fallback is the text form (``report fetch --via parsable``, the default).

Per shape, the fields gpuclust reads (job_id, array.{job_id,task_id,task}, het.{job_id,job_offset}, name,
user, account, association.{user,account}, partition, qos, state.{current,reason}, exit_code,
time.{submission,eligible,start,end,elapsed}, tres.allocated, allocation_nodes, nodes, wckey, comment.job,
steps[].{step.id, time.elapsed, tres.allocated, tres.requested.{average,max,total}, tres.consumed.total,
statistics.energy.consumed}) sit at the same paths in every shape from 21.08 to 26.05; what differs is how
values are printed. Read in Slurm's sources (/work/.mirror/SchedMD+slurm, file:function@tag):

=====================  ========  ===============  ================  ==================  ===============  =========
shape                  releases  state.current    exit_code         times (time.*)      steps[].step.id  proven on
=====================  ========  ===============  ================  ==================  ===============  =========
openapi/dbv0.0.37      20.11-    string           return_code 0     int, 0 = unset;     string (batch,   spec
(sacct 21.08)          23.02                      for any exit:     **time.start =      0)
                                                  unknown           eligible**
openapi/dbv0.0.38      22.05-    string           the same:         int, 0 = unset      string           lab 22.05
(sacct 22.05)          23.02                      unknown
data_parser/v0.0.39    23.02-    string           the same          int; null for       object {job_id,  public
(sacct 23.02)          24.05                      (-127 signaled)   NO_VAL64            step_id, ...}    23.02
data_parser/v0.0.40    23.11-    list of flags    {status[],        int; null for       string           public
(sacct 23.11)          25.05                      return_code{set,  NO_VAL64            ``<job>.<step>``  23.11,
                                                  infinite,number},                                      24.05
                                                  signal.id{...}}:
                                                  known
data_parser/v0.0.41    24.05-    list             as v0.0.40        as v0.0.40          as v0.0.40       public 24.05
                                                                                                         -25.11
data_parser/v0.0.42    24.11-    list             as v0.0.40        as v0.0.40          as v0.0.40       lab 24.11;
                                                                                                         public 24.11
                                                                                                         -25.11
data_parser/v0.0.43    25.05-    list             as v0.0.40        int; NO_VAL64 and   as v0.0.40       public 25.05
                                                                    INFINITE64 printed                   -25.11
                                                                    as integers
data_parser/v0.0.44    25.11-    list             as v0.0.40        as v0.0.43          as v0.0.40       public 25.11
data_parser/v0.0.45    26.05-    list             as v0.0.40        as v0.0.43          as v0.0.40       lab 26.05
=====================  ========  ===============  ================  ==================  ===============  =========

"public": real slurmrestd ``/slurmdb/v0.0.NN/job/{id}`` responses (the job objects of ``sacct --json``, through
the same data_parser) recorded by Slurm-web's crawler from its test clusters, for every plugin each release
serves: 23.02 (v0.0.39), 23.11 (v0.0.40), 24.05 (v0.0.41), 24.11 (v0.0.41-42), 25.05 (v0.0.41-43), 25.11
(v0.0.41-44); plus one 24.05.4 v0.0.40 response (tests/data/accounting/json/SOURCES.md). They read with the
table as it was, and agree with a hand reading (tests/unit/test_sacct_json_slurmweb.py). What they showed
beyond the parsers: a job cancelled before it started has ``time.start`` = NO_VAL 4294967294 (v0.0.41 from
25.11: read as Unknown, as the text prints it); a PENDING job may carry a ``time.start`` and an ``elapsed``
(23.11, 24.05); and the live queue (slurmrestd's ``/slurm/`` plugin: ``meta.plugin.type`` =
``openapi/slurmctld``, or ``openapi/v0.0.39`` on 23.02, in Slurm-web's recordings of it) writes a ``jobs``
list naming the same data_parser, in squeue's job shape: it is refused by name (adapter_for), where it used
to be read as rejected rows. What they cannot show: GPU counts (those clusters do not account gres/gpu:
``tres.allocated`` holds no GPU, so GPU-hours are 0 by hand too) and a v0.0.39 non-zero exit.

Common to all: array.task_id and het.job_offset are plain ints with NO_VAL 4294967294 (dbv0.0.37/38) or
{set, infinite, number} objects (v0.0.39+; plain or null in v0.0.41+'s opt-in "complex" mode); tres lists
are {type, name, id, count} (mem in MB); state.reason is job_reason_string() (v0.0.40: job_reason_string,
v0.0.41+: job_state_reason_string, the same names); wckey is {wckey, flags} or null; user may be null from
v0.0.39 on (JOB_USER falls back to the uid), then association.user is read.

Sources read:

* dbv0.0.37: src/plugins/openapi/dbv0.0.37/parse.c: parse_job[] (``_add_parse(UINT32, eligible,
  "time/start")``), _dump_job_exit_code (WIFEXITED -> return_code 0), _dump_job_state (job_state_string),
  parse_job_step[], _dump_job_steps@slurm-21-08-8-1 (the same at slurm-21-08-0-1 and slurm-22-05-8-1);
  the elapsed rule: src/plugins/accounting_storage/mysql/as_mysql_jobacct_process.c@slurm-21-08-8-1;
  meta: api.c:populate_response_format (meta.plugin.type, meta.Slurm.version ints); src/sacct/data.c
  (sacct --json = openapi/dbv0.0.37).
* dbv0.0.38: src/plugins/openapi/dbv0.0.38/parse.c@slurm-22-05-8-1 (differs from dbv0.0.37 only by
  ``container`` and ``_add_parse(UINT32, start, "time/start")``).
* v0.0.39: src/plugins/data_parser/v0.0.39/parsers.c@slurm-23-02-8-1: PARSER_ARRAY(JOB), PARSER_ARRAY(STEP),
  DUMP_FUNC(JOB_EXIT_CODE) (WIFEXITED -> 0, the same at slurm-23-02-0-1 and slurm-23-11-11-1),
  DUMP_FUNC(JOB_STATE), DUMP_FUNC(UINT64), DUMP_FUNC(UINT32_NO_VAL), DUMP_FUNC(SLURM_STEP_ID); meta:
  src/interfaces/data_parser.c:_populate_cli_response_meta (meta.plugins.data_parser, meta.Slurm ints), and
  slurmrestd: src/plugins/openapi/dbv0.0.39/api.c (meta.plugin.data_parser = "v0.0.39", no prefix).
* v0.0.40: data_parser/v0.0.40/parsers.c@slurm-23-11-11-1: PARSER_ARRAY(JOB) (bit flag array JOB_STATE,
  TIMESTAMP, PROCESS_EXIT_CODE), DUMP_FUNC(PROCESS_EXIT_CODE), PARSER_ARRAY(PROCESS_EXIT_CODE_VERBOSE),
  DUMP_FUNC(SLURM_STEP_ID_STRING), PARSER_ARRAY(OPENAPI_META) (meta.plugin.data_parser, meta.slurm strings);
  src/interfaces/data_parser.c:data_parser_cli_meta@slurm-23-11-11-1.
* v0.0.41: data_parser/v0.0.41/parsers.c@slurm-24-05-8-1; v0.0.42: @slurm-24-11-5-1; v0.0.43:
  @slurm-25-05-8-1 (DUMP_FUNC(UINT64) prints NO_VAL64/INFINITE64 outside complex mode); v0.0.44:
  @slurm-25-11-7-1; v0.0.45: @slurm-26-05-3-1. PARSER_ARRAY(JOB) and PARSER_ARRAY(STEP) hold the same
  paths and types for the fields above from v0.0.40 to v0.0.45 (v0.0.43+ declare JOB_STATE as a flag
  array type instead of add_parse_bit_flag_array: the same list).
* Which releases ship which plugin: ``git ls-tree`` of src/plugins/{openapi,data_parser}/ at each tag.

Exit codes: dbv0.0.37, dbv0.0.38 and v0.0.39 print ``return_code`` 0 for every job that exited normally,
whatever its code (a job that ran ``exit 3`` shows FAILED with return_code 0; the text ``ExitCode`` says
``3:0``): exit codes from these shapes are unknown (``exit_code_known`` false). From v0.0.40 on they are right,
FAILED jobs included (checked against the text ``ExitCode`` of the same jobs on 24.11 and 26.05). A job
killed by a signal has ``return_code`` unset and ``signal.id`` set (status SIGNALED): sacct's text prints
``0:15``. A job that never started has ``time.start`` 0.

A job object with a field that cannot be read (wrong type, a number out of range, a time past year 9999)
raises BadField; the reader rejects that row and reports it, never the whole document.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

from gpuclust.slurm.jsonshape import JsonShape, UnknownShape
from gpuclust.slurm.parse import format_slurm_duration

COMMAND = "sacct --json"
NO_VAL = 4294967294
INFINITE = 4294967295
NO_VAL64 = 2**64 - 2
INFINITE64 = 2**64 - 1
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
    if isinstance(value, int) and value in (NO_VAL64, INFINITE64):
        return "Unknown"  # v0.0.43+ print an unset 64-bit time as these integers (v0.0.39-42: null)
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
    return format_slurm_duration(secs)


def time_limit(value: Any, field: str) -> str:
    """time.limit (minutes: a plain integer or a {set, infinite, number} object) -> the Timelimit text sacct
    prints: ``[D-]HH:MM:SS``, UNLIMITED, Partition_Limit (NO_VAL), or "" when the object does not say."""
    if isinstance(value, Mapping) and value.get("infinite") is True:
        return "UNLIMITED"
    minutes = count(value, field)
    if minutes is None:
        return ""
    if minutes == INFINITE:
        return "UNLIMITED"
    if minutes == NO_VAL:
        return "Partition_Limit"
    return elapsed(minutes * 60, field)


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


def _tres_items(items: Any, field: str) -> Iterator[tuple[str, str, str, int | None]]:
    """A JSON TRES list -> (where, type, name, count) per item; a non-list or a non-object item is a BadField."""
    if items is None:
        return
    if not isinstance(items, list):
        raise BadField(field, f"{items!r:.60} is not a list")
    for i, item in enumerate(items):
        where = f"{field}[{i}]"
        item = obj(item, where)
        kind, name = text(item.get("type"), f"{where}.type"), text(item.get("name"), f"{where}.name")
        yield where, kind, name, number(item.get("count"), f"{where}.count")


def _tres_key(kind: str, name: str, where: str) -> str:
    """`gres/gpu`, `mem`: the key sacct's text prints (a ',' or '=' in it would break that text)."""
    if "," in kind + name or "=" in kind + name:
        raise BadField(where, f"TRES name {kind}/{name!r} holds ',' or '='")
    return f"{kind}/{name}" if name else kind


def tres_text(items: Any, field: str) -> str:
    """``tres.allocated`` -> the AllocTRES string sacct prints (``mem`` in MB gets its M)."""
    out = []
    for where, kind, name, n in _tres_items(items, field):
        if kind == "energy" and n is not None and n < 0:  # 24.11 prints -2 for energy never measured
            continue
        if n is not None and n < 0:
            raise BadField(f"{where}.count", f"{n} is negative")
        if not kind or n is None:
            continue
        key = _tres_key(kind, name, where)
        out.append(f"{key}={n}M" if key == "mem" else f"{key}={n}")
    return ",".join(sorted(out))  # sacct's text prints the items sorted


# Usage TRES as the JSON gives them (raw counts) -> sacct's text: cpu in ms -> a clock; sizes stay bytes
# (the text reader takes a size without a suffix as bytes).
def usage_text(items: Any, field: str) -> str:
    """A step's ``tres.requested.average`` (etc.) list -> the TRESUsageIn* string sacct prints."""
    out = []
    for where, kind, name, n in _tres_items(items, field):
        if not kind or n is None or n in (NO_VAL, INFINITE):
            continue
        key = _tres_key(kind, name, where)
        if key == "cpu" and n >= 0:
            secs, ms = divmod(n, 1000)
            out.append(f"cpu={secs // 3600:02d}:{secs % 3600 // 60:02d}:{secs % 60:02d}.{ms:03d}")
        else:
            out.append(f"{key}={n}")
    return ",".join(sorted(out))


def _step_id_object(ident: Mapping[str, Any], field: str) -> str:
    """v0.0.39's step id object -> the step part (``batch``, ``0``; ``0+1`` for a het component)."""
    part = text(ident.get("step_id"), f"{field}.step_id")
    comp = count(ident.get("step_het_component"), f"{field}.step_het_component")
    return f"{part}+{comp}" if part and comp is not None and comp != NO_VAL else part


def step_records(job: Mapping[str, Any], job_text_id: str) -> list[dict[str, str]]:
    """``jobs[].steps[]`` -> the step rows sacct's text would print (JobID ``<job>.<step>``, AllocTRES,
    Elapsed and the usage fields; the rest empty), so the usage rollup reads both front ends alike. Shapes:
    ``step.id`` is the step part (21.08, 22.05: ``batch`` or 0), an object holding it (23.02's v0.0.39:
    ``{"job_id": 123, "step_id": "batch"}``) or the whole id (v0.0.40+: ``123.batch``)."""
    steps = job.get("steps")
    if not isinstance(steps, list):
        return []
    out = []
    for i, step in enumerate(steps):
        where = f"steps[{i}]"
        step = obj(step, where)
        ident = obj(step.get("step"), f"{where}.step")
        sid = ident.get("id")
        if isinstance(sid, Mapping):  # v0.0.39: {job_id, step_het_component, step_id} (SLURM_STEP_ID)
            sid = _step_id_object(sid, f"{where}.step.id")
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


# ---- adapters: one table entry per shape ------------------------------------------------------------------

# Where each shape was proven: a recording from a real Slurm in the lab, a real document from a public source,
# or only the parsers of Slurm's sources at the release tag (spec-derived: consistency, not correctness).
LAB, PUBLIC, SPEC = "lab recording", "public real document", "spec-derived"


@dataclass(frozen=True)
class SacctJsonAdapter:
    """One ``sacct --json`` shape: its plugin, the Slurm releases that ship it, and how it differs from the
    others in the fields gpuclust reads (see the table in the module docstring). The path of each plain field
    (and any per-shape override) is declared with the field, in gpuclust.accounting.ingest.registry; the adapter holds
    what is more than a path (State, ExitCode, the job id, dbv0.0.37's Start)."""

    plugin: str
    first: tuple[int, int]  # the first Slurm release that ships the plugin
    last: tuple[int, int] | None  # the last one (None: still shipped by the newest tag read)
    proof: str
    state_list: bool = True  # state.current a list of flags (v0.0.40+), else job_state_string()'s one word
    exit_code_known: bool = True
    start_is_eligible: bool = False  # dbv0.0.37 dumps `eligible` at time/start (parse.c, 21.08 and 22.05)
    note: str = ""

    @property
    def plugins(self) -> tuple[str, ...]:
        return (self.plugin,)

    @property
    def label(self) -> str:
        last = f"{self.last[0]}.{self.last[1]:02d}" if self.last else "later"
        return f"{self.plugin} (Slurm {self.first[0]}.{self.first[1]:02d}-{last})"

    def ships_in(self, version: tuple[int, int, int] | None) -> bool:
        """Whether the Slurm release `version` has this plugin (True when the document does not say)."""
        if version is None:
            return True
        return self.first <= version[:2] and (self.last is None or version[:2] <= self.last)

    def state(self, job: Mapping[str, Any]) -> str:
        state = obj(job.get("state"), "state")
        current = state.get("current")
        if not self.state_list:
            if isinstance(current, list):  # a list in a string shape: a document of another version
                raise BadField("state.current", f"{current!r:.60} is a list; {self.plugin} prints a string")
            return text(current, "state.current")
        # The base state and its flags (["PENDING", "REQUEUED"] for a requeued execution) -> the one word
        # sacct's text prints, by Slurm's own rule (job_state_string: these flags win over the base).
        if not isinstance(current, list) or not current:
            raise BadField("state.current", f"{current!r:.60} is not a non-empty list")
        words = [text(word, f"state.current[{i}]") for i, word in enumerate(current)]
        for flag in STATE_FLAGS_SHOWN:
            if flag in words[1:]:
                return flag
        return words[0]

    def exit_code(self, job: Mapping[str, Any]) -> tuple[str, bool]:
        if not self.exit_code_known:
            return "", False
        ec = obj(job.get("exit_code"), "exit_code")
        code = count(ec.get("return_code"), "exit_code.return_code")
        signal = obj(ec.get("signal"), "exit_code.signal")
        sig = count(signal.get("id"), "exit_code.signal.id")
        if code is None and sig is None:
            return "", False
        # A job killed by a signal has no return code set (status SIGNALED): sacct's text prints 0:<signal>.
        return f"{code or 0}:{sig or 0}", True

    def start(self, job: Mapping[str, Any]) -> str:
        """Start as sacct's text prints it. dbv0.0.37 puts the eligible time at ``time.start``; slurmdbd
        computes ``elapsed = end - start - suspended`` (as_mysql_jobacct_process.c), so a job that ended has
        ``start = end - elapsed - suspended``; one still running or pending has no start in the document."""
        time_ = obj(job.get("time"), "time")
        if not self.start_is_eligible:
            return epoch(time_.get("start"), "time.start")
        end = number(time_.get("end"), "time.end")
        if end is None or end in (0, NO_VAL, INFINITE):
            return "Unknown"
        spent = (count(time_.get("elapsed"), "time.elapsed") or 0) + (count(time_.get("suspended"), "time.suspended")
                                                                       or 0)
        return epoch(end - spent, "time.start")

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


# The state flags Slurm's job_state_string() prints instead of the base state, in its order of precedence.
STATE_FLAGS_SHOWN = ("COMPLETING", "STAGE_OUT", "CONFIGURING", "RESIZING", "REQUEUED", "REQUEUE_FED",
                     "REQUEUE_HOLD", "SPECIAL_EXIT", "STOPPED", "REVOKED", "RESV_DEL_HOLD", "SIGNALING")

_LOST_EXIT = ("Input is sacct --json from {release} ({plugin}), which reports return code 0 for jobs that exited "
              "non-zero: exit codes are unknown (null) on this path. A run counts as completed when its last "
              "attempt is COMPLETED (Slurm sets COMPLETED only for exit code 0).")

# The table: one entry per shape, each only its differences (the module docstring says where each was read).
ADAPTER_TABLE: tuple[SacctJsonAdapter, ...] = (
    SacctJsonAdapter("openapi/dbv0.0.37", (20, 11), (23, 2), SPEC, state_list=False, exit_code_known=False,
                     start_is_eligible=True,
                     note=_LOST_EXIT.format(release="Slurm 21.08", plugin="openapi/dbv0.0.37")
                     + " Start is derived as End - Elapsed - Suspended (this shape prints the eligible time "
                       "as time.start); unknown for jobs still running."),
    SacctJsonAdapter("openapi/dbv0.0.38", (22, 5), (23, 2), LAB, state_list=False, exit_code_known=False,
                     note=_LOST_EXIT.format(release="Slurm 22.05", plugin="openapi/dbv0.0.38")),
    SacctJsonAdapter("data_parser/v0.0.39", (23, 2), (24, 5), PUBLIC, state_list=False, exit_code_known=False,
                     note=_LOST_EXIT.format(release="Slurm 23.02", plugin="data_parser/v0.0.39")),
    SacctJsonAdapter("data_parser/v0.0.40", (23, 11), (25, 5), PUBLIC),
    SacctJsonAdapter("data_parser/v0.0.41", (24, 5), (25, 11), PUBLIC),
    SacctJsonAdapter("data_parser/v0.0.42", (24, 11), (26, 5), LAB),
    SacctJsonAdapter("data_parser/v0.0.43", (25, 5), None, PUBLIC),
    SacctJsonAdapter("data_parser/v0.0.44", (25, 11), None, PUBLIC),
    SacctJsonAdapter("data_parser/v0.0.45", (26, 5), None, LAB),
)
ADAPTERS: dict[str, SacctJsonAdapter] = {a.plugin: a for a in ADAPTER_TABLE}
KNOWN_PLUGINS: tuple[str, ...] = tuple(ADAPTERS)
DEFAULT_ADAPTER = ADAPTERS["openapi/dbv0.0.38"]  # for a document with neither jobs nor meta: nothing to read
FALLBACK_HINT = "Read sacct's text output instead (`report fetch --via parsable`, or a --parsable2 dump)"


# What writes the live queue, not accounting: slurmrestd's /slurm/ plugin (openapi/slurmctld, 23.11+;
# openapi/v0.0.NN before) and the CLI commands other than sacct. Their documents hold a ``jobs`` list and name
# the same data_parser as sacct's, so the data_parser alone cannot tell them apart (Slurm-web's recordings,
# tests/data/accounting/json/SOURCES.md).
_QUEUE_KIND = re.compile(r"openapi/(?:slurmctld|v\d+\.\d+\.\d+)")
_QUEUE_COMMANDS = frozenset({"squeue", "scontrol", "sinfo", "sacctmgr", "sdiag", "sshare", "sprio"})


def _queue_source(shape: JsonShape) -> str:
    """Why meta says the document is not accounting ('' when it does not say so)."""
    if _QUEUE_KIND.fullmatch(shape.kind):
        return f"meta.plugin.type is {shape.kind}"
    if shape.command in _QUEUE_COMMANDS:
        return f"meta.command is {shape.command}"
    return ""


def adapter_for(shape: JsonShape, command: str = COMMAND) -> SacctJsonAdapter:
    """The adapter for a document's shape; UnknownShape (naming command, what meta says, the versions read)
    for any other: an unknown plugin, a meta block that is missing, malformed or says two things, or a plugin
    that the named Slurm release does not ship (a document mixing versions)."""
    known = tuple(a.label for a in ADAPTER_TABLE)
    if shape.conflict:
        raise UnknownShape(command, shape, known, FALLBACK_HINT)
    queue = _queue_source(shape)
    if queue:
        raise UnknownShape(command, shape, known, f"{queue}: that is slurmctld's job queue (squeue's job shape: "
                           "no state.current, tres.allocated or time.elapsed), not accounting. Give `sacct --json` "
                           "or slurmrestd's /slurmdb/v0.0.NN/jobs instead")
    adapter = ADAPTERS.get(shape.plugin)
    if adapter is None:
        raise UnknownShape(command, shape, known, FALLBACK_HINT)
    if not adapter.ships_in(shape.version):
        hint = (f"meta mixes versions: Slurm {shape.release} does not ship {adapter.label}. {FALLBACK_HINT}")
        raise UnknownShape(command, shape, known, hint)
    return adapter
