"""The one normalized schema every accounting input lands in.

Both front ends (``sacct --parsable2`` text in any delimiter, and ``sacct --json``) first produce a *raw
table*: one string column per sacct field below (``RAW_FIELDS``), plus the record's line number and whether
its exit code is known. ``gpuclust.accounting.ingest.normalize`` turns that into the typed table described by
``SCHEMA``; it is the only place field values are interpreted, so both paths give identical figures.

String columns may come dictionary-encoded (``dictionary<int32, string>``, the same values): the text front
end reads the repetitive ones that way, and the metrics group on the codes. ``table.cast(SCHEMA)`` gives
the plain form (the store writes that).

One row = one job *allocation* record (steps such as ``123.batch``, ``123.0`` are dropped while parsing;
with ``sacct -D`` each earlier execution of a requeued job is its own row, in state REQUEUED).

Columns (all times are UTC, second resolution):

====================  ==============  ==============================================================
column                type            meaning
====================  ==============  ==============================================================
line                  int64           line (text) or record number (JSON) where the record starts
job_id                string          JobID as sacct prints it: ``123``, ``123_4``, ``123_[1-5]``, ``123+0``
job_id_raw            int64           JobIDRaw (unique per job; shared by all executions of a requeued job)
job_base              int64           the number before ``_`` / ``+``: array master id or het leader id
array_task            int64, null     array task index (``123_4`` -> 4); null if not an array task
array_pending         string, null    the still-pending task range of ``123_[1-5]``
het_offset            int64, null     het component (``123+1`` -> 1); null if not a het component
job_name              string          JobName (may hold ``|``, newlines, quotes, unicode)
user, account,        string          as sacct prints them ("" when empty)
partition, qos,
wckey, comment,
nodelist
state                 string          first word of State: ``CANCELLED by 0`` -> ``CANCELLED``
state_raw             string          State as printed
reason                string, null    Reason: the pending reason sacct kept (the last one slurmctld sent;
                                      ``None`` once most jobs start); null where the input has no Reason
                                      column (older dumps and stores: unknown, not "no reason")
exit_code             int64, null     first half of ExitCode ``a:b``; null when unknown
exit_signal           int64, null     second half of ExitCode; null when unknown
exit_code_known       bool            False where the input cannot know it (sacct --json 22.05)
submit, eligible,     timestamp[s]    null for ``Unknown``/``None``/empty
start, end            UTC, null
elapsed_s             int64           Elapsed ``[DD-[HH:]]MM:SS`` in seconds
nnodes                int64           NNodes
alloc_tres            string          AllocTRES as printed
gpus                  int64           the untyped ``gres/gpu`` count of AllocTRES; without it, the sum of the
                                      typed ``gres/gpu:<type>`` counts; 0 if neither
gpu_type              string, null    ``<type>`` when the typed keys name one type; the mix ``a100=1,h100=3``
                                      (``*=N``: GPUs of the untyped total beyond the typed) for several; null
                                      if none (fields.gpu_facts; priced type by type)
mem_mb                float64, null   ``mem=`` of AllocTRES in MiB
submit_line           string, null    SubmitLine: the submitting command's argv joined by spaces (its quoting
                                      lost); null where the input has no SubmitLine column
timelimit_s           int64, null     Timelimit in seconds; null for UNLIMITED, Partition_Limit, unknown, or no
                                      Timelimit column
req_tres              string, null    ReqTRES as printed (what the job asked for); null where the input has
                                      no ReqTRES column
====================  ==============  ==============================================================

The usage columns rolled up from the steps' usage TRES (``gpu_util_gpu_s``, ``gpu_busy_gpu_s``,
``gpu_util_max_pct``, ``gpu_mem_max_mb``, ``cpu_used_s``, ``mem_max_mb``, ``energy_j``, ``gpu_util_rule``) are
described in gpuclust.accounting.ingest.usage. A column of a new field gets its row here.

The Parquet store adds ``fetched_at`` (timestamp) and ``window`` (the UTC day string ``YYYY-MM-DD`` of the
sacct window the row came from), used to keep each execution's latest state, and what `report fetch` computed of
the row's GPUs (store layout 5; null in days written before): ``alloc_gpu_equivalents`` (float64, the row's GPU GRES in
GPU-equivalents as the report counts them, gpuclust.accounting.figures.shares; null: unknown) and
``gpu_share_unknown`` (string, the warning code that made the share unknown; null where it is known). Only engines
other than gpuclust read them (gpuclust.accounting.history.store_sql); the report computes the shares itself.
"""

from __future__ import annotations

import pyarrow as pa

from gpuclust.accounting.ingest.registry import REGISTRY, UTC_SECONDS

# Everything below is derived from the field registry (gpuclust.accounting.ingest.registry): declare a field there.

# sacct fields a dump must contain (any order; other columns are ignored).
REQUIRED_FIELDS: tuple[str, ...] = REGISTRY.required
OPTIONAL_FIELDS: tuple[str, ...] = REGISTRY.optional
RAW_FIELDS: tuple[str, ...] = REGISTRY.raw
# Fields whose free text may contain the delimiter of a plain `|` dump.
FREE_TEXT_FIELDS: tuple[str, ...] = REGISTRY.free_text

# The field list `report fetch` asks sacct for. JobID first, so a newline inside a name can never make a
# continuation line look like the start of a record; a fixed-format field last, so a free-text value that
# ends in a newline cannot be mistaken for a blank line after the record.
FETCH_FIELDS: tuple[str, ...] = REGISTRY.fetch

# Unit separator, '|', record separator: three characters no job name is expected to hold together.
FETCH_DELIMITER = "\x1f|\x1e"

SCHEMA: pa.Schema = REGISTRY.schema

# The time columns (submit, eligible, start, end): every column of the registry's UTC-seconds type.
TIME_COLUMNS: tuple[str, ...] = tuple(fd.name for fd in SCHEMA if fd.type == UTC_SECONDS)

# The columns `report fetch` adds to a stored row (store.Stage.write_day), after the ingest's.
STORE_SHARE_COLUMNS = (pa.field("alloc_gpu_equivalents", pa.float64()), pa.field("gpu_share_unknown", pa.string()))
STORE_SCHEMA = SCHEMA.append(pa.field("fetched_at", UTC_SECONDS)).append(pa.field("window", pa.string()))
for _field in STORE_SHARE_COLUMNS:
    STORE_SCHEMA = STORE_SCHEMA.append(_field)
del _field

# Raw string field -> normalized column for the plain copies.
PLAIN_STRING_COLUMNS: dict[str, str] = REGISTRY.copies

# The string columns of the fields that repeat few values (SacctField.dictionary): the readers and the store's
# reads keep them as dictionary codes.
DICTIONARY_COLUMNS: tuple[str, ...] = tuple(c.name for fd in REGISTRY.fields if fd.dictionary for c in fd.columns
                                            if pa.types.is_string(c.type))

KNOWN_STATES = frozenset(
    {
        "BOOT_FAIL", "CANCELLED", "COMPLETED", "DEADLINE", "FAILED", "NODE_FAIL", "OUT_OF_MEMORY", "PENDING",
        "PREEMPTED", "RUNNING", "REQUEUED", "RESIZING", "REVOKED", "SUSPENDED", "TIMEOUT", "SPECIAL_EXIT",
        "REQUEUE_FED", "REQUEUE_HOLD", "STOPPED",
    }
)
