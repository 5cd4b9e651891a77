"""Sorting and grouping of integer keys over a million rows, fast on a small VM.

On small machines ``argsort`` of a million int64 costs several times a plain ``np.sort``, and every
fresh array costs page faults (BENCHMARKS.md, "Measurements behind the code's design choices").
So keys are packed into int64 words with the row position in the low bits and sorted with ``np.sort``
(a stable radix-style sort, least significant word first), rows already in order are detected and not
sorted at all (sacct prints jobs in id order), and groups of one row are not sorted twice.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def key_digits(keys: Sequence[np.ndarray], budget: int) -> list[tuple[np.ndarray, int]] | None:
    """The keys as non-negative int64 digits of at most `budget` bits, most significant first; None when a
    key is not integer-valued (a fraction, NaN) or too wide to shift safely."""
    digits: list[tuple[np.ndarray, int]] = []
    for key in keys:
        if key.dtype.kind == "f":
            if len(key) and (np.abs(key).max() >= 2**62):  # NaN fails the next test
                return None
            with np.errstate(invalid="ignore"):
                as_int = key.astype(np.int64)
            if not (as_int == key).all():  # a fraction or NaN
                return None
            key = as_int
        elif key.dtype.kind == "b":
            key = key.astype(np.int64)
        lo, hi = int(key.min()), int(key.max())
        if abs(lo) >= 2**62 or abs(hi) >= 2**62:
            return None
        # (Fresh arrays are costly on a VM: subtract only when needed, and in place.)
        shifted = key.astype(np.int64, copy=key.dtype != np.int64 or lo != 0)
        if lo:
            shifted -= lo
        width = max(1, (hi - lo).bit_length())
        while width > budget:  # too wide for one digit: its high bits first
            width -= budget
            digits.append((shifted >> width, budget))
            shifted = shifted & ((1 << width) - 1)
        digits.append((shifted, width))
    return digits


def lex_perm(keys: Sequence[np.ndarray]) -> np.ndarray | None:
    """Stable lexicographic order of the rows (first key most significant); None when the rows are in
    order already.

    A least-significant-digit radix sort whose digit sorts are plain ``np.sort`` calls (SIMD, several
    times quicker than ``argsort``) of (digit << b | position) words: the position makes each pass stable
    and, read back from the low bits, is the permutation. Digits of several keys share one word where their
    widths allow; a pass over a digit already in order is skipped."""
    n = len(keys[0]) if keys else 0
    if n == 0:
        return None
    if len(keys) == 1 and keys[0].dtype.kind in "iu" and (keys[0][1:] >= keys[0][:-1]).all():
        return None  # one integer key already in order: nothing to pack
    pos_bits = max(1, (n - 1).bit_length())
    budget = 63 - pos_bits
    digits = key_digits(keys, budget) if budget >= 8 else None
    if digits is None:
        plain = np.lexsort(list(keys)[::-1])
        return None if np.array_equal(plain, np.arange(n)) else plain
    words: list[np.ndarray] = []
    word, bits = np.zeros(n, dtype=np.int64), 0
    for digit, width in digits:
        if bits + width > budget:
            words.append(word)
            word, bits = np.zeros(n, dtype=np.int64), 0
        if bits:
            word <<= width
            word |= digit
        else:
            word = digit.copy() if len(digits) > 1 else digit
        bits += width
    words.append(word)
    if in_order(words):
        return None
    position = np.arange(n, dtype=np.int64)
    mask = (1 << pos_bits) - 1
    order: np.ndarray | None = None
    for word in reversed(words):
        w = word if order is None else word[order]
        if (w[1:] >= w[:-1]).all():
            continue  # a stable sort of rows already in order changes nothing
        packed = w << pos_bits
        packed |= position
        packed.sort()
        packed &= mask
        perm = packed
        order = perm if order is None else order[perm]
    return order


def in_order(words: Sequence[np.ndarray]) -> bool:
    """Are the rows already in lexicographic order of `words`? (sacct prints jobs in id order, so the
    JobID sorts usually find them so.)"""
    undecided = np.ones(len(words[0]) - 1, dtype=bool)
    for word in words:
        later, earlier = word[1:], word[:-1]
        if (undecided & (later < earlier)).any():
            return False
        undecided &= later == earlier
        if not undecided.any():
            break
    return True


def lex_order(keys: Sequence[np.ndarray]) -> np.ndarray:
    """Stable lexicographic order of the rows (first key most significant)."""
    perm = lex_perm(keys)
    return np.arange(len(keys[0]) if keys else 0, dtype=np.int64) if perm is None else perm


def factorize(key: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Dense ids of an integer key (in key order) and the key of each id. A lookup table when the key's
    range is small, else a sort."""
    if len(key) == 0:
        return np.zeros(0, dtype=np.int64), key
    lo, hi = int(key.min()), int(key.max())
    if hi - lo < max(4 * len(key), 1 << 16):
        present = np.zeros(hi - lo + 1, dtype=bool)
        present[key - lo] = True
        ids = np.cumsum(present) - 1
        return ids[key - lo], np.flatnonzero(present) + lo
    uniq, inverse = np.unique(key, return_inverse=True)
    return inverse.reshape(-1).astype(np.int64), uniq


def group_starts(sorted_keys: Sequence[np.ndarray]) -> np.ndarray:
    """Indices where a new group begins in rows sorted by `sorted_keys`."""
    n = len(sorted_keys[0])
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    new = np.zeros(n, dtype=bool)
    new[0] = True
    for key in sorted_keys:
        new[1:] |= key[1:] != key[:-1]
    return np.flatnonzero(new)


def group_order(major: np.ndarray, minors: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """The stable order of the rows by (major, *minors), and where each run of equal `major` starts in it.

    Most groups hold one row: the rows are sorted by `major` alone, then only the rows of groups with
    several members are ordered by the minors (a small sort, not a second pass over every row)."""
    n = len(major)
    perm = lex_perm([major]) if n else None
    order = np.arange(n, dtype=np.int64) if perm is None else perm
    starts = group_starts([major if perm is None else major[perm]])
    if minors and len(starts) < n:  # some group holds several rows
        sizes = np.diff(np.r_[starts, n])
        at = np.flatnonzero(np.repeat(sizes > 1, sizes))  # positions of the rows of multi-row groups
        rows = order[at]
        group = np.repeat(np.arange(len(starts)), sizes)[at]
        order[at] = rows[lex_order([group, *(minor[rows] for minor in minors)])]
    return order, starts


def group_ids(keys: Sequence[np.ndarray]) -> np.ndarray:
    """One integer per distinct combination of the keys (equal rows, equal ids): the keys packed into one
    word where their ranges allow, else dense ids from a sort."""
    digits = key_digits(keys, 62)
    if digits is not None and sum(width for _, width in digits) <= 62:
        packed = digits[0][0].copy()
        for digit, width in digits[1:]:
            packed <<= width
            packed |= digit
        return packed
    order = lex_order(keys)
    new_group = np.zeros(len(order), dtype=np.int64)
    new_group[group_starts([k[order] for k in keys])] = 1
    ids_sorted = np.cumsum(new_group) - 1
    ids = np.empty(len(order), dtype=np.int64)
    ids[order] = ids_sorted
    return ids


def in_sorted(values: np.ndarray, sorted_values: np.ndarray) -> np.ndarray:
    """Whether each of `values` is among `sorted_values` (sorted ascending), by binary search: np.isin would
    build a table over the whole range of the values, or sort both sides."""
    if not len(sorted_values):
        return np.zeros(len(values), dtype=bool)
    at = np.minimum(np.searchsorted(sorted_values, values), len(sorted_values) - 1)
    return np.asarray(sorted_values[at] == values, dtype=bool)
