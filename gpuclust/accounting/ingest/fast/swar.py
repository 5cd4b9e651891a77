"""Fixed-shape sacct fields read straight from a byte buffer: the fast path of `fields`' vectorised parsers.

The direct text reader (gpuclust.accounting.ingest.text) hands over the raw bytes of a column: rows of one width,
each `prefix` (the rest of a multi-character delimiter) and then the value. The values of the usual shape
are parsed here eight bytes at a time (SWAR: each uint64 holds eight characters; digits are checked and
combined with a few integer operations per word), in blocks that stay in cache. Rows not of that exact
shape come back as not ok; the caller gives those to the vectorised parsers in `fields`, which define the field.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

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
_MONTH_TABLES: tuple[np.ndarray, np.ndarray] | None = None


def _month_tables() -> tuple[np.ndarray, np.ndarray]:
    """(days since 1970-01-01 of the month's first day, days in the month) at key ``yy << 7 | month`` for each
    month 2000-01..2099-12; (0, 0) for every other key (month 0 or > 12), so that no day is valid there. Two
    small tables (200 KB), not one of every date: a 6.5 MB table costs a small input more to build (its pages
    first touched) than its reading takes."""
    global _MONTH_TABLES
    if _MONTH_TABLES is None:
        months = np.arange(2000 * 12, 2100 * 12 + 1) - 1970 * 12  # months since 1970-01, one past the end
        starts = months.astype("datetime64[M]").astype("datetime64[D]").astype(np.int64)
        yy, month = np.divmod(np.arange(len(starts) - 1), 12)
        keys = yy << 7 | (month + 1)
        first = np.zeros(100 << 7, dtype=np.int64)
        length = np.zeros(100 << 7, dtype=np.uint64)
        first[keys] = starts[:-1]
        length[keys] = np.diff(starts)
        _MONTH_TABLES = first, length
    return _MONTH_TABLES


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
    month_first, month_length = _month_tables()
    size = min(rows, block_rows)
    xa, xb, xc, bad, s1, s2, length = (np.empty(size, dtype=np.uint64) for _ in range(7))
    days: np.ndarray = np.empty(size, dtype=np.int64)
    day_outside = np.empty(size, dtype=bool)
    for r0 in range(0, rows, block_rows):
        nb = min(block_rows, rows - r0)
        if nb != len(xa):
            xa, xb, xc, bad, s1, s2, length = (a[:nb] for a in (xa, xb, xc, bad, s1, s2, length))
            days, day_outside = days[:nb], day_outside[:nb]
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
        # Date: the month's tables at key yy << 7 | month; the day (0..99) is valid where 1 <= day <= its length.
        np.bitwise_and(xa, _YM_MASK, out=s1)
        np.multiply(s1, _YM_MUL, out=s1)
        np.right_shift(s1, np.uint64(40), out=s1)
        np.take(month_first, s1.view(np.int64), out=days, mode="clip")
        np.take(month_length, s1.view(np.int64), out=length, mode="clip")
        np.right_shift(xb, np.uint64(40), out=s2)
        np.bitwise_and(s2, np.uint64(0xFF), out=s2)
        np.subtract(s2, np.uint64(1), out=s2)  # day - 1 (day 0 wraps to 2**64 - 1)
        np.add(days, s2.view(np.int64), out=days)
        # Outside the month where day - 1 >= its length: one unsigned compare checks both ends.
        np.greater_equal(s2, length, out=day_outside)
        np.bitwise_or(bad, day_outside, out=bad)
        _seconds_of_day(xc, s1, s2)
        block = epoch[r0 : r0 + nb]
        np.multiply(days, 86400, out=block)
        np.add(block, s1.view(np.int64), out=block)
        good = ok[r0 : r0 + nb]
        np.equal(bad, 0, out=good)
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
_LOW7 = np.uint64(0x7F7F7F7F7F7F7F7F)
_DIGIT_ADD = np.uint64(0x7676767676767676)


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
