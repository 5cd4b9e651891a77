"""Summarise benchmarks/accept_allreduce_overhead.sh: median busbw per size, harness vs bare loop."""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

from gpuclust.accept.results import load_results


def main() -> None:
    out = Path(sys.argv[1])
    harness: dict[int, list[float]] = {}
    for rdir in sorted((out / "harness").iterdir()):
        for res in load_results(rdir):
            for s in res.sweep:
                harness.setdefault(s.size, []).append(s.busbw_gbps)
    bare: dict[int, list[float]] = {}
    for f in sorted(out.glob("bare-r*.jsonl")):
        for line in f.read_text().splitlines():
            d = json.loads(line)
            bare.setdefault(d["size"], []).append(d["busbw_gbps"])
    rows = []
    for size in sorted(harness):
        h, b = statistics.median(harness[size]), statistics.median(bare[size])
        rows.append({"size": size, "harness_busbw": [round(x, 3) for x in harness[size]],
                     "bare_busbw": [round(x, 3) for x in bare[size]], "harness_median": round(h, 3),
                     "bare_median": round(b, 3), "ratio": round(h / b, 3)})
    print(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
