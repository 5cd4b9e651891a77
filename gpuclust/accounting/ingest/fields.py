"""One parser per sacct field, each in two forms that must agree (a unit test checks they do):

* a scalar function (``parse_job_id``, ``parse_state``...) that defines the field, used for rare rows
  and as the reference in tests;
* a vectorised function (``v_job_id``...) over a pyarrow string array, used on the hot path so a million
  rows never go through a Python loop. Each returns its typed arrays plus a boolean ``bad`` mask of rows
  whose value could not be parsed (those rows are reported by line number, never silently dropped).

The direct text reader adds a third form for the fixed-shape fields (times, Elapsed, JobID): kernels over
the raw bytes (`fast/swar.py`: `fixed_times`, `fixed_clock`, `job_ids_swar`) that take the rows of the usual
exact shape and leave every other row to the vectorised function, whose result they equal (tests check it).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from gpuclust.errors import SlurmOutputError
from gpuclust.slurm.parse import UNKNOWN_TIMES, parse_slurm_duration, parse_tres

# ---- job id -----------------------------------------------------------------------------------------

# Numbers in sacct fields: at most 18 digits, so every value fits int64 (Slurm's own are 32-bit); a longer one
# makes the field bad (the row is rejected and reported), never an overflow.
_N = "[0-9]{1,18}"
_JOB_ID = rf"^(?P<base>{_N})(?:_(?P<task>{_N})|_\[(?P<pend>[^\]]*)\]|\+(?P<het>{_N}))?(?:\.(?P<step>[^.]+))?$"
_JOB_ID_RE = re.compile(_JOB_ID)


@dataclass(frozen=True)
class JobId:
    """A JobID's parts: the job, its array task or pending array range, its het offset and its step."""

    base: int
    array_task: int | None = None
    array_pending: str | None = None
    het_offset: int | None = None
    step: str | None = None  # batch, extern, 0, ... (step rows are dropped by the normalizer)


def parse_job_id(text: str) -> JobId:
    """``123``, ``123_4``, ``123_[1-5]``, ``123+0``, each optionally followed by ``.batch``/``.extern``/``.N``."""
    match = _JOB_ID_RE.fullmatch(text)
    if not match:
        raise SlurmOutputError(f"bad JobID {text!r}")
    base, task, pend, het, step = match.groups()
    return JobId(
        int(base),
        int(task) if task else None,
        pend if pend is not None else None,
        int(het) if het else None,
        step or None,
    )


# ---- state, exit code ---------------------------------------------------------------------------------

_STATE = r"^(?P<s>[A-Z][A-Z_]*)(?:\s(?s:.*))?$"
_STATE_RE = re.compile(_STATE)


def parse_state(text: str) -> str:
    """``CANCELLED by 0`` -> ``CANCELLED``; ``REQUEUED``, ``NODE_FAIL``... unchanged."""
    match = _STATE_RE.fullmatch(text)
    if not match:
        raise SlurmOutputError(f"bad State {text!r}")
    return match.group("s")


_EXIT = rf"^(?P<c>{_N}):(?P<s>{_N})$"
_EXIT_RE = re.compile(_EXIT)


def parse_exit_code(text: str) -> tuple[int, int]:
    """``1:0`` -> (1, 0): exit status and the signal that ended the job."""
    match = _EXIT_RE.fullmatch(text)
    if not match:
        raise SlurmOutputError(f"bad ExitCode {text!r}")
    return int(match.group("c")), int(match.group("s"))


# ---- times, durations ---------------------------------------------------------------------------------

TIME_FORMAT = "%Y-%m-%dT%H:%M:%S"
_TIME_RE = re.compile(r"^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}$")


def parse_time_epoch(text: str) -> int | None:
    """``2026-12-02T10:58:03`` (UTC, as the fetch pins TZ and SLURM_TIME_FORMAT) -> epoch s; Unknown -> None."""
    from datetime import datetime, timezone

    raw = text
    if raw in UNKNOWN_TIMES:
        return None
    if not _TIME_RE.fullmatch(raw):
        raise SlurmOutputError(f"bad time {text!r}")
    try:
        parsed = datetime.strptime(raw, TIME_FORMAT)
    except ValueError:  # right shape, impossible value (month 13, Feb 30)
        raise SlurmOutputError(f"bad time {text!r}") from None
    return int(parsed.replace(tzinfo=timezone.utc).timestamp())


_E = "[0-9]{1,9}"  # (days * 86400 stays far inside int64)
_ELAPSED = rf"^(?:(?P<d>{_E})-)?(?:(?P<h>{_E}):)?(?P<m>{_E}):(?P<s>{_E})$"


def parse_elapsed(text: str) -> int:
    """Elapsed ``[DD-[HH:]]MM:SS`` -> seconds."""
    if not re.fullmatch(_ELAPSED, text):
        raise SlurmOutputError(f"bad Elapsed {text!r}")
    value = parse_slurm_duration(text)
    assert value is not None and value >= 0
    return value


def parse_timelimit(text: str) -> int | None:
    """Timelimit ``[DD-[HH:]]MM:SS`` -> seconds; None for UNLIMITED, Partition_Limit, Unknown or empty (no
    limit known: never 0)."""
    value = parse_slurm_duration(text)
    if value is None or value < 0:
        return None
    return value


def v_timelimit(text: pa.Array) -> tuple[pa.Array, np.ndarray]:
    """parse_timelimit over an array (a dictionary field: called once per distinct value)."""
    values: list[int | None] = []
    bad = np.zeros(len(text), dtype=bool)
    for i, item in enumerate(text.to_pylist()):
        try:
            values.append(None if item is None else parse_timelimit(item))
        except SlurmOutputError:
            values.append(None)
            bad[i] = True
    return pa.array(values, pa.int64()), bad


# ---- TRES ---------------------------------------------------------------------------------------------

_MEM_UNITS = {"K": 1 / 1024, "M": 1.0, "G": 1024.0, "T": 1024.0**2, "P": 1024.0**3, "": 1.0}
_TRES_SYNTAX = r"^(?:[^,=\s]+=[^,=\s]*(?:,[^,=\s]+=[^,=\s]*)*)?$"


@dataclass(frozen=True)
class TresFacts:
    """What an AllocTRES string says: the GPU count, the GPU type and the memory in MB."""

    gpus: int
    gpu_type: str | None
    mem_mb: float | None


MIX_OTHER = "*"  # in a GPU mix: GPUs of the untyped total that no typed key accounts for


def _tres_int(value: str) -> int:
    if not re.fullmatch(_N, value):
        raise SlurmOutputError(f"bad TRES count {value!r}")
    return int(value)


def gpu_facts(tres: dict[str, str]) -> tuple[int, str | None]:
    """(GPU count, GPU type) of a TRES dict.

    Count: the untyped ``gres/gpu`` total when present, else the sum of the typed ``gres/gpu:<type>`` keys
    (sacct 24.11 can record typed keys alone). Type: the one type when every typed GPU is of one type and
    no untyped GPU is left over; None when there is no typed key; else the mix ``a100=1,h100=3`` (types
    sorted, ``*=N`` for the GPUs of the untyped total beyond the typed ones), priced type by type."""
    untyped = _tres_int(tres["gres/gpu"]) if "gres/gpu" in tres else None
    typed: dict[str, int] = {}
    for key, value in tres.items():
        if key.startswith("gres/gpu:"):
            count = _tres_int(value)
            if count:
                typed[key[len("gres/gpu:"):]] = count
    total = sum(typed.values())
    gpus = untyped if untyped is not None else total
    if gpus > 2**62:
        raise SlurmOutputError(f"GPU count {gpus} out of range")
    other = untyped - total if untyped is not None and untyped > total else 0
    if not typed:
        return gpus, None
    if len(typed) == 1 and not other:
        return gpus, next(iter(typed))
    mix = [f"{name}={count}" for name, count in sorted(typed.items())]
    if other:
        mix.append(f"{MIX_OTHER}={other}")
    return gpus, ",".join(mix)


def gpu_mix(gpu_type: str | None) -> dict[str, int] | None:
    """The weights of a mixed `gpu_type` (``a100=1,h100=3``); None for a single type or none."""
    if not gpu_type or "=" not in gpu_type:
        return None
    return {name: int(count) for name, _, count in (item.partition("=") for item in gpu_type.split(","))}


def parse_alloc_tres(text: str) -> TresFacts:
    """GPU count, GPU type (see `gpu_facts`) and memory of an AllocTRES string."""
    tres = parse_tres(text)
    mem = tres.get("mem")
    mem_mb: float | None = None
    if mem is not None:
        match = re.fullmatch(r"([0-9]+(?:\.[0-9]+)?)([KMGTP]?)", mem)
        if not match:
            raise SlurmOutputError(f"bad mem TRES {mem!r}")
        mem_mb = float(match.group(1)) * _MEM_UNITS[match.group(2)]
    gpus, gtype = gpu_facts(tres)
    return TresFacts(gpus, gtype, mem_mb)


# ---- vectorised forms ----------------------------------------------------------------------------------


def _empty_to_null(arr: pa.Array) -> pa.Array:
    return pc.if_else(pc.equal(arr, ""), pa.scalar(None, arr.type), arr)


def _mask(arr: pa.Array) -> np.ndarray:
    return np.asarray(pc.fill_null(arr, False).to_numpy(zero_copy_only=False), dtype=bool)


def valid_mask(arr: pa.Array) -> np.ndarray:
    """Which values of an array are not null, from its validity bitmap (no compute kernel)."""
    if not arr.null_count:
        return np.ones(len(arr), dtype=bool)
    bits = np.frombuffer(arr.buffers()[0], dtype=np.uint8)
    return np.unpackbits(bits, bitorder="little")[arr.offset : arr.offset + len(arr)].astype(bool)


def nullable(values: np.ndarray, valid: np.ndarray | None, kind: pa.DataType) -> pa.Array:
    """A fixed-width pyarrow array over `values` (no copy), null where not `valid`."""
    if valid is None or valid.all():
        return pa.Array.from_buffers(kind, len(values), [None, pa.py_buffer(values)], null_count=0)
    bitmap = pa.py_buffer(np.packbits(valid, bitorder="little"))
    return pa.Array.from_buffers(kind, len(values), [bitmap, pa.py_buffer(values)],
                                 null_count=int(len(valid) - np.count_nonzero(valid)))


def _int(arr: pa.Array) -> pa.Array:
    return pc.cast(_empty_to_null(arr), pa.int64())


def by_unique(func: Callable[[pa.Array], tuple[Any, ...]], text: pa.Array) -> tuple[Any, ...]:
    """``func(text)`` for an element-wise vectorised parser, computed once per distinct value.

    Most sacct fields (State, ExitCode, AllocTRES, NNodes, Elapsed) repeat a few values over millions of
    rows; each output (a pyarrow array or a numpy mask) is taken back to the rows by the dictionary indices.
    """
    if isinstance(text, pa.ChunkedArray):
        text = text.combine_chunks()
    if text.null_count or len(text) == 0:
        return func(text)
    enc = pc.dictionary_encode(text)
    if len(enc.dictionary) * 2 > len(text):
        return func(text)
    indices = enc.indices
    idx_np = indices.to_numpy()
    out: list[Any] = []
    for value in func(enc.dictionary):
        if isinstance(value, np.ndarray):
            out.append(value[idx_np])
        elif isinstance(value, dict):
            out.append({k: pc.take(v, indices) for k, v in value.items()})
        else:
            out.append(pc.take(value, indices))
    return tuple(out)


def v_job_id(text: pa.Array) -> tuple[dict[str, pa.Array], np.ndarray, np.ndarray]:
    """-> ({job_base, array_task, array_pending, het_offset}, is_step, bad).

    Most ids are plain numbers: those take a cheap all-digits test and a cast; only the others (arrays, het
    components, steps, garbage) go through the full regex of `_v_job_id_regex`, and are put back in place.
    """
    if isinstance(text, pa.ChunkedArray):
        text = text.combine_chunks()
    plain = _mask(pc.match_substring_regex(text, f"^{_N}$"))
    if len(text) < 10_000 or not plain.any():
        return _v_job_id_regex(text)
    other = ~plain
    sub, sub_step, sub_bad = _v_job_id_regex(text.filter(pa.array(other)))
    mask = pa.array(other)
    n = len(text)
    out = {
        "job_base": pc.replace_with_mask(
            pc.cast(pc.if_else(mask, pa.scalar(None, pa.string()), text), pa.int64()), mask, sub["job_base"]),
        "array_task": pc.replace_with_mask(pa.nulls(n, pa.int64()), mask, sub["array_task"]),
        "het_offset": pc.replace_with_mask(pa.nulls(n, pa.int64()), mask, sub["het_offset"]),
        "array_pending": pc.replace_with_mask(pa.nulls(n, pa.string()), mask, sub["array_pending"]),
    }
    is_step = np.zeros(n, dtype=bool)
    bad = np.zeros(n, dtype=bool)
    is_step[other] = sub_step
    bad[other] = sub_bad
    return out, is_step, bad


def _v_job_id_regex(text: pa.Array) -> tuple[dict[str, pa.Array], np.ndarray, np.ndarray]:
    parts = pc.extract_regex(text, _JOB_ID)
    bad = _mask(pc.is_null(parts))
    out = {
        "job_base": _int(pc.struct_field(parts, "base")),
        "array_task": _int(pc.struct_field(parts, "task")),
        "het_offset": _int(pc.struct_field(parts, "het")),
    }
    # `_[` right after the job number distinguishes a pending range (which may be empty) from a non-pending id
    # (RE2 gives "" for a group that took no part; a step named `_[`, as in `12._[`, is no range).
    pend = pc.struct_field(parts, "pend")
    ranged = pc.match_substring_regex(text, rf"^{_N}_\[")
    out["array_pending"] = pc.if_else(ranged, pend, pa.scalar(None, pa.string()))
    step = pc.struct_field(parts, "step")
    is_step = _mask(pc.not_equal(step, ""))
    return out, is_step, bad


def v_state(text: pa.Array) -> tuple[pa.Array, np.ndarray]:
    parts = pc.extract_regex(text, _STATE)
    return pc.struct_field(parts, "s"), _mask(pc.is_null(parts))


def v_exit_code(text: pa.Array, known: pa.Array) -> tuple[pa.Array, pa.Array, np.ndarray]:
    """Unknown exit codes (``known`` False) give nulls and are not errors."""
    parts = pc.extract_regex(text, _EXIT)
    code = pc.if_else(known, pc.cast(pc.struct_field(parts, "c"), pa.int64()), pa.scalar(None, pa.int64()))
    sig = pc.if_else(known, pc.cast(pc.struct_field(parts, "s"), pa.int64()), pa.scalar(None, pa.int64()))
    bad = _mask(pc.and_(known, pc.is_null(parts)))
    return code, sig, bad


FIXED_TIME_MIN_ROWS = 10_000  # below this the kernels of the reference are as quick
_TIME_DIGITS = (0, 1, 2, 3, 5, 6, 8, 9, 11, 12, 14, 15, 17, 18)
_TIME_PUNCT = ((4, ord("-")), (7, ord("-")), (10, ord("T")), (13, ord(":")), (16, ord(":")))
_DAYS_IN_MONTH = np.array([0, 31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31], dtype=np.int32)
_DAYS_BEFORE_MONTH = np.concatenate([[0], np.cumsum(_DAYS_IN_MONTH)[:-1]]).astype(np.int32)  # index 1 = Jan = 0
_YEAR_LO, _YEAR_HI = 1970, 2200
_LEAP = np.array([(y % 4 == 0 and y % 100 != 0) or y % 400 == 0 for y in range(_YEAR_LO, _YEAR_HI + 1)])
_DAYS_BEFORE_YEAR = np.concatenate([[0], np.cumsum(365 + _LEAP.astype(np.int32))[:-1]]).astype(np.int32)


def v_time(text: pa.Array) -> tuple[pa.Array, np.ndarray]:
    """-> (timestamp[s, UTC] with nulls for unknown/bad, bad mask); the result of `_v_time_ref`.

    Fast path: values of exactly ``YYYY-MM-DDTHH:MM:SS`` with a valid date and time (nearly all of them) are
    read as fixed-width digits with numpy; every other row (Unknown, garbage, leap seconds, far years...)
    goes through the reference kernels and is put back in place.
    """
    if isinstance(text, pa.ChunkedArray):
        if text.num_chunks == 0:
            return _v_time_ref(text)
        parts = [v_time(chunk) for chunk in text.chunks]
        return (pa.chunked_array([p[0] for p in parts], pa.timestamp("s", tz="UTC")),
                np.concatenate([p[1] for p in parts]))
    if len(text) < FIXED_TIME_MIN_ROWS or text.type != pa.string() or text.null_count:
        return _v_time_ref(text)
    n = len(text)
    is_fixed = np.asarray(pc.equal(pc.binary_length(text), 19).to_numpy(zero_copy_only=False), dtype=bool)
    fixed = np.flatnonzero(is_fixed)
    if not len(fixed):
        return _v_time_ref(text)
    # The 19-byte values, filtered into one buffer, are a (rows, 19) byte matrix without any copy.
    sel = text if len(fixed) == n else text.filter(pa.array(is_fixed))
    first = int(np.frombuffer(sel.buffers()[1], dtype=np.int32)[sel.offset])
    chars = np.frombuffer(sel.buffers()[2], dtype=np.uint8)[first : first + 19 * len(fixed)].reshape(-1, 19)
    digits = chars[:, _TIME_DIGITS] - np.uint8(0x30)  # wraps below '0' to a large value
    ok = (digits <= 9).all(axis=1)
    for pos, char in _TIME_PUNCT:
        ok &= chars[:, pos] == char
    d = digits.astype(np.int32)
    year = d[:, 0] * 1000 + d[:, 1] * 100 + d[:, 2] * 10 + d[:, 3]
    month, day = d[:, 4] * 10 + d[:, 5], d[:, 6] * 10 + d[:, 7]
    hour, minute, second = d[:, 8] * 10 + d[:, 9], d[:, 10] * 10 + d[:, 11], d[:, 12] * 10 + d[:, 13]
    # Only plainly valid values are taken here; anything doubtful is left to the reference.
    ok &= (year >= _YEAR_LO) & (year <= _YEAR_HI) & (month >= 1) & (month <= 12)
    y = np.clip(year, _YEAR_LO, _YEAR_HI) - _YEAR_LO
    m = np.clip(month, 0, 12)
    leap_feb = (m > 2) & _LEAP[y]
    ok &= (day >= 1) & (day <= _DAYS_IN_MONTH[m] + ((m == 2) & _LEAP[y])) & (hour <= 23) & (minute <= 59)
    ok &= second <= 59
    days = _DAYS_BEFORE_YEAR[y] + _DAYS_BEFORE_MONTH[m] + leap_feb + (day - 1)
    epoch = days.astype(np.int64) * 86400 + (hour * 3600 + minute * 60 + second)
    values = np.zeros(n, dtype=np.int64)
    valid = np.zeros(n, dtype=bool)
    values[fixed[ok]] = epoch[ok]
    valid[fixed[ok]] = True
    rest = ~valid
    out = pa.Array.from_buffers(
        pa.timestamp("s", tz="UTC"), n, [pa.array(valid).buffers()[1], pa.py_buffer(values)], null_count=int(rest.sum())
    )
    bad = np.zeros(n, dtype=bool)
    if rest.any():
        ref, ref_bad = _v_time_ref(text.filter(pa.array(rest)))
        out = pc.replace_with_mask(out, pa.array(rest), ref)
        bad[rest] = ref_bad
    return out, bad


def _v_time_ref(text: pa.Array) -> tuple[pa.Array, np.ndarray]:
    unknown = pc.is_in(text, value_set=pa.array(sorted(UNKNOWN_TIMES)))
    parsed = pc.strptime(text, format=TIME_FORMAT, unit="s", error_is_null=True)
    # strptime accepts some things the scalar parser does not (leading spaces...): hold both to one rule.
    shape_ok = pc.match_substring_regex(text, r"^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}$")
    bad = _mask(pc.and_(pc.invert(unknown), pc.or_(pc.is_null(parsed), pc.invert(shape_ok))))
    value = pc.if_else(unknown, pa.scalar(None, parsed.type), parsed)
    # (sacct's times are UTC: a cast marks them so, as assume_timezone(UTC) would, without loading the tz database)
    return pc.cast(value, pa.timestamp("s", tz="UTC")), bad


def v_elapsed(text: pa.Array) -> tuple[pa.Array, np.ndarray]:
    parts = pc.extract_regex(text, _ELAPSED)
    bad = _mask(pc.is_null(parts))

    def num(name: str) -> pa.Array:
        return pc.fill_null(_int(pc.struct_field(parts, name)), 0)

    d, h, m, s = num("d"), num("h"), num("m"), num("s")
    # As `parse_elapsed` (Slurm's own reading): with days, two fields are hours:minutes, not minutes:seconds.
    days_no_hours = pc.fill_null(pc.and_(pc.is_valid(_int(pc.struct_field(parts, "d"))),
                                         pc.is_null(_int(pc.struct_field(parts, "h")))), False)
    h, m, s = pc.if_else(days_no_hours, m, h), pc.if_else(days_no_hours, s, m), pc.if_else(days_no_hours, 0, s)
    secs = pc.add(
        pc.add(pc.multiply(d, 86400), pc.multiply(h, 3600)),
        pc.add(pc.multiply(m, 60), s),
    )
    return pc.fill_null(secs, 0), bad


def v_alloc_tres(text: pa.Array) -> tuple[pa.Array, pa.Array, pa.Array, np.ndarray]:
    """-> (gpus, gpu_type, mem_mb, bad), as `parse_alloc_tres`. Rows with several typed GPU keys, or typed and
    untyped counts that differ (rare), use the scalar parser."""
    syntax_ok = pc.match_substring_regex(text, _TRES_SYNTAX)
    untyped = pc.extract_regex(text, r"(?:^|,)gres/gpu=(?P<n>[^,]*)(?:,|$)")
    gpus_txt = pc.struct_field(untyped, "n")
    gpus = pc.cast(pc.if_else(pc.match_substring_regex(gpus_txt, f"^{_N}$"), gpus_txt, pa.scalar(None, pa.string())), pa.int64())
    bad_gpus = pc.and_(pc.is_valid(untyped), pc.is_null(gpus))

    typed = pc.extract_regex(text, r"(?:^|,)gres/gpu:(?P<t>[^=,]+)=(?P<n>[^,]*)(?:,|$)")
    typed_txt = pc.struct_field(typed, "n")
    typed_ok = pc.match_substring_regex(typed_txt, f"^{_N}$")
    typed_n = pc.cast(pc.if_else(typed_ok, typed_txt, pa.scalar(None, pa.string())), pa.int64())
    bad_typed = pc.and_(pc.is_valid(typed), pc.is_null(typed_n))
    gtype = pc.if_else(
        pc.and_(pc.is_valid(typed), pc.not_equal(typed_n, 0)),
        pc.struct_field(typed, "t"),
        pa.scalar(None, pa.string()),
    )
    # No untyped key: the typed count is the count (0 without either).
    gpus = pc.fill_null(pc.coalesce(gpus, typed_n), 0)
    mem = pc.extract_regex(text, r"(?:^|,)mem=(?P<v>[0-9]+(?:\.[0-9]+)?)(?P<u>[KMGTP]?)(?:,|$)")
    units = pa.array(["", "K", "M", "G", "T", "P"])
    factors = pa.array([1.0, 1 / 1024, 1.0, 1024.0, 1024.0**2, 1024.0**3])
    factor = pc.take(factors, pc.index_in(pc.struct_field(mem, "u"), value_set=units))
    mem_mb = pc.multiply(pc.cast(pc.struct_field(mem, "v"), pa.float64()), factor)
    bad_mem = pc.and_(pc.match_substring_regex(text, r"(?:^|,)mem="), pc.is_null(mem))

    bad = _mask(pc.or_(pc.or_(bad_gpus, bad_typed), bad_mem))
    # The scalar parser is the definition; rows outside the strict shape the regexes assume (spaces, empty
    # items, repeated keys, several typed GPU keys, an untyped total other than the typed count) are rare and
    # go through it.
    tricky = ~_mask(syntax_ok)
    tricky |= _mask(pc.and_(pc.is_valid(untyped), pc.not_equal(pc.struct_field(untyped, "n"), typed_txt)))
    for key in ("gres/gpu:", "gres/gpu=", "mem="):
        tricky |= _mask(pc.greater(pc.count_substring(text, key), 1))
    if tricky.any():
        idx = np.flatnonzero(tricky)
        g_list, t_list, m_list = gpus.to_pylist(), gtype.to_pylist(), mem_mb.to_pylist()
        for i in idx:
            try:
                facts = parse_alloc_tres(text[int(i)].as_py())
            except SlurmOutputError:
                bad[i] = True
                continue
            bad[i] = False
            g_list[i], t_list[i], m_list[i] = facts.gpus, facts.gpu_type, facts.mem_mb
        gpus = pa.array(g_list, pa.int64())
        gtype = pa.array(t_list, pa.string())
        mem_mb = pa.array(m_list, pa.float64())
    return gpus, gtype, mem_mb, bad


def v_int(text: pa.Array) -> tuple[pa.Array, np.ndarray]:
    ok = pc.match_substring_regex(text, f"^{_N}$")
    value = pc.cast(pc.if_else(ok, text, pa.scalar(None, pa.string())), pa.int64())
    return value, ~_mask(ok)
