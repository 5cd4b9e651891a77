"""Summarise benchmarks/accept_allreduce_overhead.sh: per size, harness vs bare loop, paired by round.

For each size: the busbw of every round for the harness, the bare loop and (BARE_CHECK=1) the bare loop with the
harness's correctness step; the per-round ratio harness/bare (the pair ran back to back, in alternating order);
the median ratio; how many rounds the harness was the slower of its pair (a sign test: with no real
difference that count is Binomial(n, 1/2), and its two-sided p-value is printed); and the spread of the bare
loop alone (max/min over rounds), the noise any gap must beat.
"""

from __future__ import annotations

import json
import math
import re
import statistics
import sys
from pathlib import Path

from gpuclust.accept.results import load_results


def sign_test_p(slower: int, n: int) -> float:
    """Two-sided binomial p-value of `slower` of n under p = 1/2."""
    k = min(slower, n - slower)
    tail = sum(math.comb(n, i) for i in range(k + 1)) / 2**n
    return min(1.0, 2 * tail)


def _bare(out: Path, suffix: str) -> dict[int, dict[int, float]]:
    by_round: dict[int, dict[int, float]] = {}
    for f in out.glob(f"bare{suffix}-r*.jsonl"):
        m = re.fullmatch(rf"bare{suffix}-r([0-9]+)\.jsonl", f.name)
        if not m:
            continue
        for line in f.read_text().splitlines():
            d = json.loads(line)
            by_round.setdefault(int(d["size"]), {})[int(m.group(1))] = float(d["busbw_gbps"])
    return by_round


def main() -> None:
    out = Path(sys.argv[1])
    harness: dict[int, dict[int, float]] = {}
    for rdir in (out / "harness").iterdir():
        r = int(rdir.name.lstrip("r"))
        for res in load_results(rdir):
            for s in res.sweep:
                harness.setdefault(s.size, {})[r] = s.busbw_gbps
    bare, check = _bare(out, ""), _bare(out, "-check")
    rows = []
    for size in sorted(harness):
        rounds = sorted(set(harness[size]) & set(bare.get(size, {})))
        ratios = [harness[size][r] / bare[size][r] for r in rounds]
        slower = sum(x < 1 for x in ratios)
        b = [bare[size][r] for r in rounds]
        row = {"size": size, "rounds": len(rounds),
               "harness_busbw": [round(harness[size][r], 3) for r in rounds],
               "bare_busbw": [round(x, 3) for x in b],
               "paired_ratios": [round(x, 3) for x in ratios],
               "median_ratio": round(statistics.median(ratios), 3) if ratios else None,
               "harness_slower_rounds": slower,
               "sign_test_p": round(sign_test_p(slower, len(ratios)), 3) if ratios else None,
               "bare_spread_max_over_min": round(max(b) / min(b), 3) if b else None}
        if size in check:
            crounds = sorted(set(check[size]) & set(bare[size]))
            cr = [check[size][r] / bare[size][r] for r in crounds]
            row["bare_check_busbw"] = [round(check[size][r], 3) for r in crounds]
            row["bare_check_over_bare_median"] = round(statistics.median(cr), 3) if cr else None
        rows.append(row)
    print(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
