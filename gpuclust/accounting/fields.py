"""One parser per sacct field, each in two forms that must agree (a unit test checks they do):

* a scalar function (``parse_job_id``, ``parse_state``...) that defines the field, used for rare rows
  and as the reference in tests;
* a vectorised function (``v_job_id``...) over a pyarrow string array, used on the hot path so a million
  rows never go through a Python loop. Each returns its typed arrays plus a boolean ``bad`` mask of rows
  whose value could not be parsed (those rows are reported by line number, never silently dropped).

The direct text reader adds a third form for the fixed-shape fields (times, Elapsed, JobID): kernels over
the raw bytes (`fixed_times`, `fixed_clock`, `job_ids_swar`) that take the rows of the usual exact shape and
leave every other row to the vectorised function, whose result they equal (tests check it).
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


# ---- TRES ---------------------------------------------------------------------------------------------

_MEM_UNITS = {"K": 1 / 1024, "M": 1.0, "G": 1024.0, "T": 1024.0**2, "P": 1024.0**3, "": 1.0}
_TRES_SYNTAX = r"^(?:[^,=\s]+=[^,=\s]*(?:,[^,=\s]+=[^,=\s]*)*)?$"


@dataclass(frozen=True)
class TresFacts:
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
    return pc.cast(pc.assume_timezone(value, "UTC"), pa.timestamp("s", tz="UTC")), bad


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


# ---- fixed-width fields read straight from a byte buffer ---------------------------------------------------
#
# The direct text reader (gpuclust.accounting.text) hands over the raw bytes of a column: rows of one width,
# each `prefix` (the rest of a multi-character delimiter) and then the value. The values of the usual shape
# are parsed here eight bytes at a time (SWAR: each uint64 holds eight characters; digits are checked and
# combined with a few integer operations per word), in blocks that stay in cache. Rows not of that exact
# shape come back as not ok; the caller gives those to the vectorised parsers above, which define the field.

SWAR_BLOCK_ROWS = 1 << 15
_H80 = np.uint64(0x8080808080808080)


def _u64(raw: bytes) -> np.uint64:
    return np.uint64(int.from_bytes(raw.ljust(8, b"\0"), "little"))


def _shape(text: str) -> tuple[np.uint64, np.uint64]:
    """(expected, add) for an 8-character shape of digits (``d``) and literal characters. A word `w` has the
    shape iff every byte of ``((x + add) | x) & 0x80..80`` is 0, with ``x = w ^ expected``: a digit byte
    leaves 0..9 (+0x76 stays below 0x80), a literal leaves 0 (+0x7F stays below 0x80); any other byte sets
    bit 7 of its own byte (a carry out of a byte only happens where that byte already failed)."""
    expected = bytes(0x30 if c == "d" else ord(c) for c in text)
    add = bytes(0x76 if c == "d" else 0x7F for c in text)
    return _u64(expected), _u64(add)


_T_A = _shape("20dd-dd-")  # t[0:8]   (years 2000..2099 only; others take the reference)
_T_B = _shape("d-dd-ddT")  # t[3:11]
_T_C = _shape("dd:dd:dd")  # t[11:19]
_CLOCK = _shape("dd:dd:dd")
_DATE_TABLE: np.ndarray | None = None


def _date_table() -> np.ndarray:
    """Days since 1970-01-01 of each valid date 2000-01-01..2099-12-31, at key ``yy << 14 | month << 7 | day``;
    -1 for every other key (month 0 or > 12, day 0 or past the month's end)."""
    global _DATE_TABLE
    if _DATE_TABLE is None:
        table = np.full(100 << 14, -1, dtype=np.int32)
        months = np.arange(2000 * 12, 2100 * 12 + 1) - 1970 * 12  # months since 1970-01, one past the end
        starts = months.astype("datetime64[M]").astype("datetime64[D]").astype(np.int64)
        first, dim = starts[:-1], np.diff(starts)
        yy, month = np.divmod(np.arange(len(first)), 12)
        day = np.arange(1, 32)
        valid = day[None, :] <= dim[:, None]
        keys = (yy[:, None] << 14) | ((month[:, None] + 1) << 7) | day[None, :]
        table[keys[valid]] = (first[:, None] + day[None, :] - 1)[valid]
        _DATE_TABLE = table
    return _DATE_TABLE


def _rows(data: np.ndarray, at: int, rows: int, stride: int) -> np.ndarray:
    """The uint64 at byte `at` of each of `rows` rows `stride` bytes apart (a strided view, no copy)."""
    return np.ndarray((rows,), dtype="<u8", buffer=data, offset=at, strides=(stride,))


def _prefix_check(data: np.ndarray, at: int, rows: int, stride: int, prefix: bytes, out: np.ndarray,
                  scratch: np.ndarray) -> None:
    """out |= (the first len(prefix) bytes of each row differ from `prefix`) (nonzero where they do)."""
    if prefix:
        np.bitwise_xor(_rows(data, at, rows, stride), _u64(prefix), out=scratch)
        np.bitwise_and(scratch, _u64(b"\xff" * len(prefix)), out=scratch)
        np.bitwise_or(out, scratch, out=out)


def _shape_check(x: np.ndarray, word: np.ndarray, shape: tuple[np.uint64, np.uint64], out: np.ndarray,
                 scratch: np.ndarray, first: bool = False) -> None:
    """x = word ^ expected; out |= (x + add) | x (bit 7 of a byte set where the shape fails)."""
    np.bitwise_xor(word, shape[0], out=x)
    np.add(x, shape[1], out=scratch)
    np.bitwise_or(scratch, x, out=scratch)
    if first:
        out[:] = scratch
    else:
        np.bitwise_or(out, scratch, out=out)


def _pairs(x: np.ndarray, scratch: np.ndarray) -> None:
    """Digit bytes (0..9) -> byte k holds 10 * byte k + byte k+1 (the two-digit number starting there)."""
    np.multiply(x, np.uint64(10), out=scratch)
    np.right_shift(x, np.uint64(8), out=x)
    np.add(x, scratch, out=x)


_HM_MASK = np.uint64(0xFF | 0xFF << 24)  # bytes 0 (hours) and 3 (minutes) of a "HH:MM:SS" word's pairs
_HM_MUL = np.uint64((3600 << 40) + (60 << 16))  # -> hours * 3600 + minutes * 60 at bit 40
_YM_MASK = np.uint64(0xFF << 16 | 0xFF << 40)  # bytes 2 (yy) and 5 (month) of a "20YY-MM-" word's pairs
_YM_MUL = np.uint64((1 << 31) + 1)  # -> yy << 7 | month at bit 40
_CLOCK_RANGE_MASK = np.uint64(0xFF | 0xFF << 24 | 0xFF << 48)
_CLOCK_RANGE_ADD = np.uint64((0x80 - 24) | (0x80 - 60) << 24 | (0x80 - 60) << 48)  # hours <= 23, min, sec <= 59
_CLOCK_RANGE_BITS = np.uint64(0x80 | 0x80 << 24 | 0x80 << 48)


def _seconds_of_day(x: np.ndarray, out: np.ndarray, scratch: np.ndarray) -> None:
    """`x`: pairs of a "HH:MM:SS" word -> out = HH * 3600 + MM * 60 + SS."""
    np.bitwise_and(x, _HM_MASK, out=out)
    np.multiply(out, _HM_MUL, out=out)
    np.right_shift(out, np.uint64(40), out=out)
    np.right_shift(x, np.uint64(48), out=scratch)
    np.bitwise_and(scratch, np.uint64(0xFF), out=scratch)
    np.add(out, scratch, out=out)


def fixed_times(
    data: np.ndarray, first: int, rows: int, prefix: bytes, out: tuple[np.ndarray, np.ndarray] | None = None,
    block_rows: int = SWAR_BLOCK_ROWS, tail: int = 0,
) -> tuple[np.ndarray, np.ndarray]:
    """Rows of ``prefix + "YYYY-MM-DDTHH:MM:SS"`` (len(prefix) <= 8) back to back in `data` from byte `first`
    -> (epoch seconds UTC, ok), written to `out` when given. ok: the row has exactly that shape, a year
    2000..2099 and a valid date and time; there the value is what `v_time` gives. Elsewhere the value is
    unspecified."""
    plen = len(prefix)
    if plen > 8:
        raise ValueError("prefix longer than 8 bytes")
    stride = plen + 19 + tail  # (`tail` bytes after each value, not looked at)
    epoch, ok = out if out is not None else (np.empty(rows, dtype=np.int64), np.empty(rows, dtype=bool))
    table = _date_table()
    size = min(rows, block_rows)
    xa, xb, xc, bad, s1, s2 = (np.empty(size, dtype=np.uint64) for _ in range(6))
    days: np.ndarray = np.empty(size, dtype=np.int32)
    for r0 in range(0, rows, block_rows):
        nb = min(block_rows, rows - r0)
        if nb != len(xa):
            xa, xb, xc, bad, s1, s2 = (a[:nb] for a in (xa, xb, xc, bad, s1, s2))
            days = days[:nb]
        at = first + r0 * stride
        _shape_check(xa, _rows(data, at + plen, nb, stride), _T_A, bad, s1, first=True)
        _shape_check(xb, _rows(data, at + plen + 3, nb, stride), _T_B, bad, s1)
        _shape_check(xc, _rows(data, at + plen + 11, nb, stride), _T_C, bad, s1)
        np.bitwise_and(bad, _H80, out=bad)
        _prefix_check(data, at, nb, stride, prefix, bad, s1)
        for x in (xa, xb, xc):
            _pairs(x, s1)
        # Clock ranges (the pairs are 0..99, so adding stays within each byte).
        np.bitwise_and(xc, _CLOCK_RANGE_MASK, out=s1)
        np.add(s1, _CLOCK_RANGE_ADD, out=s1)
        np.bitwise_and(s1, _CLOCK_RANGE_BITS, out=s1)
        np.bitwise_or(bad, s1, out=bad)
        # Date: key yy << 14 | month << 7 | day, looked up in the table of valid dates.
        np.bitwise_and(xa, _YM_MASK, out=s1)
        np.multiply(s1, _YM_MUL, out=s1)
        np.right_shift(s1, np.uint64(40), out=s1)
        np.left_shift(s1, np.uint64(7), out=s1)
        np.right_shift(xb, np.uint64(40), out=s2)
        np.bitwise_and(s2, np.uint64(0xFF), out=s2)
        np.bitwise_or(s1, s2, out=s1)
        np.take(table, s1.view(np.int64), out=days, mode="clip")
        _seconds_of_day(xc, s1, s2)
        block = epoch[r0 : r0 + nb]
        np.multiply(days, 86400, out=block, dtype=np.int64)
        np.add(block, s1.view(np.int64), out=block)
        good = ok[r0 : r0 + nb]
        np.equal(bad, 0, out=good)
        good &= days >= 0
    return epoch, ok


def fixed_clock(
    data: np.ndarray, first: int, rows: int, prefix: bytes, out: tuple[np.ndarray, np.ndarray] | None = None,
    block_rows: int = SWAR_BLOCK_ROWS, tail: int = 0,
) -> tuple[np.ndarray, np.ndarray]:
    """Rows of ``prefix + "HH:MM:SS"`` back to back -> (HH * 3600 + MM * 60 + SS, ok), written to `out` when
    given: an Elapsed of that shape (any two digits each, as `v_elapsed` reads them)."""
    plen = len(prefix)
    if plen > 8:
        raise ValueError("prefix longer than 8 bytes")
    stride = plen + 8 + tail
    secs, ok = out if out is not None else (np.empty(rows, dtype=np.int64), np.empty(rows, dtype=bool))
    size = min(rows, block_rows)
    x, bad, s1, s2 = (np.empty(size, dtype=np.uint64) for _ in range(4))
    for r0 in range(0, rows, block_rows):
        nb = min(block_rows, rows - r0)
        if nb != len(x):
            x, bad, s1, s2 = (a[:nb] for a in (x, bad, s1, s2))
        at = first + r0 * stride
        _shape_check(x, _rows(data, at + plen, nb, stride), _CLOCK, bad, s1, first=True)
        np.bitwise_and(bad, _H80, out=bad)
        _prefix_check(data, at, nb, stride, prefix, bad, s1)
        _pairs(x, s1)
        _seconds_of_day(x, s1, s2)
        secs[r0 : r0 + nb] = s1.view(np.int64)
        np.equal(bad, 0, out=ok[r0 : r0 + nb])
    return secs, ok


_ZEROS = _u64(b"0" * 8)
_ALL = np.uint64(0xFFFFFFFFFFFFFFFF)
_LOW7 = np.uint64(0x7F7F7F7F7F7F7F7F)
_UNDERSCORES = _u64(b"_" * 8)
_DIGIT_ADD = np.uint64(0x7676767676767676)
_POW10 = np.array([10**k for k in range(19)], dtype=np.int64)


def _digits8(x: np.ndarray, s: np.ndarray) -> None:
    """Eight digit bytes (0..9, the first the most significant) -> their number, in place."""
    _pairs(x, s)  # byte 2k: 10 * d[2k] + d[2k+1]
    np.right_shift(x, np.uint64(16), out=s)
    np.bitwise_and(s, np.uint64(0xFF | 0xFF << 32), out=s)
    np.multiply(s, np.uint64(1 + (10000 << 32)), out=s)
    np.bitwise_and(x, np.uint64(0xFF | 0xFF << 32), out=x)
    np.multiply(x, np.uint64(100 + (1000000 << 32)), out=x)
    np.add(x, s, out=x)
    np.right_shift(x, np.uint64(32), out=x)


def _length_tables() -> dict[str, np.ndarray]:
    """Per value length 0..17 (17: longer), for the 16-byte window that ends where the value ends: the mask of
    the value's bytes in the low (last 8 bytes) and high word, the bit 7 of the value's first byte in each,
    and whether the length fits."""
    keep_lo, keep_hi, first_lo, first_hi = (np.zeros(18, dtype=np.uint64) for _ in range(4))
    for length in range(18):
        n = min(length, 16)
        window = [16 - n <= pos for pos in range(16)]
        keep_lo[length] = sum(0xFF << (8 * b) for b in range(8) if window[8 + b])
        keep_hi[length] = sum(0xFF << (8 * b) for b in range(8) if window[b])
        if 1 <= length <= 16:
            pos = 16 - length
            if pos >= 8:
                first_lo[length] = 0x80 << (8 * (pos - 8))
            else:
                first_hi[length] = 0x80 << (8 * pos)
    return {"keep_lo": keep_lo, "keep_hi": keep_hi, "first_lo": first_lo, "first_hi": first_hi}


_LEN = _length_tables()
_UNDERSCORE_X = _u64(bytes([ord("_") ^ 0x30] * 8))  # '_' after the xor with '0's


def _classify(x: np.ndarray, digits: np.ndarray, under: np.ndarray, s: np.ndarray) -> None:
    """x: a word xor '0'*8 (bytes outside the value already 0). -> digits: bit 7 of each byte that is not a
    digit; under: bit 7 of each byte that is '_'. Both exact per byte."""
    np.add(x, _DIGIT_ADD, out=digits)
    np.bitwise_or(digits, x, out=digits)
    np.bitwise_and(digits, _H80, out=digits)
    np.bitwise_xor(x, _UNDERSCORE_X, out=s)
    np.bitwise_and(s, _LOW7, out=under)
    np.add(under, _LOW7, out=under)
    np.bitwise_or(under, s, out=under)
    np.invert(under, out=under)
    np.bitwise_and(under, _H80, out=under)


def job_ids_swar(data: np.ndarray, offsets: np.ndarray, block_rows: int = SWAR_BLOCK_ROWS,
                 ends: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """JobIDs (a binary column: `data` bytes, `offsets`) of the two usual shapes, ``123`` and ``123_4`` (up to
    16 characters), -> (job_base, array_task, has_task, ok). ok rows are exactly what `v_job_id` gives
    (no step, not bad, no het offset or pending range); the others are left to it. With `ends`, value i is
    data[offsets[i]:ends[i]] (a prefix of each value: a step id's job part)."""
    starts = offsets[:-1] if ends is None else offsets
    ends = offsets[1:] if ends is None else ends
    rows = len(starts)
    if rows == 0 or len(data) < 16:
        return (np.zeros(rows, dtype=np.int64), np.zeros(rows, dtype=np.int64), np.zeros(rows, dtype=bool),
                np.zeros(rows, dtype=bool))
    # (np.empty, not np.zeros: every row is written below, and reused heap memory is much cheaper than fresh)
    base = np.empty(rows, dtype=np.int64)
    task = np.empty(rows, dtype=np.int64)
    has_task = np.empty(rows, dtype=bool)
    ok = np.empty(rows, dtype=bool)
    # The 16 bytes that end where each value ends (rows ending within the buffer's first 16 bytes, at most
    # two, are left to the reference).
    words = np.ndarray((len(data) - 7,), dtype="<u8", buffer=data, strides=(1,))
    m = min(rows, block_rows)
    xh, xl, dh, dl, uh, ul, s = (np.empty(m, dtype=np.uint64) for _ in range(7))
    for r0 in range(0, rows, block_rows):
        r1 = min(rows, r0 + block_rows)
        nb = r1 - r0
        if nb != len(xh):
            xh, xl, dh, dl, uh, ul, s = (a[:nb] for a in (xh, xl, dh, dl, uh, ul, s))
        end = ends[r0:r1].astype(np.intp)
        length = end - starts[r0:r1]
        early = end < 16
        if early.any():
            end = np.maximum(end, 16)
        np.minimum(length, 17, out=length)
        np.bitwise_xor(words[end - 8], _ZEROS, out=xl)
        np.bitwise_and(xl, _LEN["keep_lo"][length], out=xl)
        np.bitwise_xor(words[end - 16], _ZEROS, out=xh)
        np.bitwise_and(xh, _LEN["keep_hi"][length], out=xh)
        _classify(xl, dl, ul, s)
        _classify(xh, dh, uh, s)
        # Every byte a digit or '_', the length 1..16; at most one '_', in the last 8 bytes, not the value's
        # first or last byte (a longer task number is left to the reference).
        np.bitwise_xor(dl, ul, out=dl)  # non-digit bytes that are not '_'
        np.bitwise_or(dl, dh, out=dl)  # (any non-digit in the high word, '_' included)
        shape = dl == 0
        shape &= (length >= 1) & (length <= 16)
        count = np.bitwise_count(ul)
        np.bitwise_and(ul, _LEN["first_lo"][length], out=s)
        count[s != 0] = 2
        count[(ul >> np.uint64(63)) != 0] = 2
        ok_rows = ok[r0:r1]
        np.less(count, 2, out=ok_rows)
        ok_rows &= shape
        if early.any():
            ok_rows &= ~early
        np.greater(count, 0, out=has_task[r0:r1])
        has_task[r0:r1] &= ok_rows
        # Branch-free split at the '_' (none: ul = 0 gives "everything is base"): b = its byte in the low
        # word, the task = the bytes after it, the base = the bytes before it moved up by 8 - b bytes.
        np.left_shift(ul, np.uint64(1), out=s)
        np.subtract(s, np.uint64(1), out=s)
        np.invert(s, out=s)  # bytes above the '_' (0 when none)
        np.bitwise_and(s, xl, out=dh)  # dh: the task's digits
        np.right_shift(ul, np.uint64(7), out=s)
        np.subtract(s, np.uint64(1), out=s)  # bytes below the '_' (all when none)
        np.bitwise_and(xl, s, out=xl)
        np.subtract(ul, np.uint64(1), out=s)
        shift = np.bitwise_count(s).astype(np.uint64)  # 8 * b + 7 when b exists, 64 when none
        np.bitwise_and(shift, np.uint64(~7 & 0xFF), out=shift)
        np.subtract(np.uint64(64), shift, out=shift)  # 64 - 8 b, or 0
        # The window as one 128-bit little-endian number is xh + xl * 2**64: moving its bytes up by 8 - b
        # is a left shift of that number.
        np.left_shift(xl, shift, out=xl)
        np.subtract(np.uint64(64), shift, out=s)
        np.right_shift(xh, s, out=s)  # (a shift by 64 gives 0)
        np.bitwise_or(xl, s, out=xl)
        np.left_shift(xh, shift, out=xh)
        _digits8(xh, s)
        _digits8(xl, s)
        _digits8(dh, s)
        number = base[r0:r1]
        np.multiply(xh.view(np.int64), 100_000_000, out=number)
        number += xl.view(np.int64)
        task[r0:r1] = dh.view(np.int64)
    return base, task, has_task, ok


def buffers_of(arr: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """(data bytes, offsets) of a binary array, offsets for its own rows (len + 1 of them)."""
    bufs = arr.buffers()
    kind = np.int64 if pa.types.is_large_binary(arr.type) or pa.types.is_large_string(arr.type) else np.int32
    offsets = np.frombuffer(bufs[1], dtype=kind)[arr.offset : arr.offset + len(arr) + 1]
    data = np.frombuffer(bufs[2], dtype=np.uint8) if bufs[2] is not None else np.zeros(8, dtype=np.uint8)
    return data, offsets


def rows_equal(a: np.ndarray, a_first: int, b: np.ndarray, b_first: int, rows: int, width: int) -> np.ndarray:
    """Whether row i of `a` equals row i of `b`: rows of `width` (>= 8) bytes back to back from `a_first`,
    `b_first`."""
    if width < 8:
        raise ValueError("rows shorter than 8 bytes")
    same = np.ones(rows, dtype=bool)
    if not rows:
        return same
    for at in [*range(0, width - 7, 8), width - 8]:
        same &= _rows(a, a_first + at, rows, width) == _rows(b, b_first + at, rows, width)
    return same
