"""Lemon nodes over 1,000 nodes' worth of events (issue 46 bad input): a week of hour-long 8-GPU jobs on every
node, node failures scattered over all of them and one lemon, through figures.lemon.compute (BENCHMARKS.md,
"Lemon nodes")."""

from __future__ import annotations

import random
import sys
import time

from gpuclust.accounting.figures import lemon


def jobs(nodes: int = 1000, hours: int = 7 * 24, seed: int = 46) -> list[lemon.JobRow]:
    rnd = random.Random(seed)
    out = []
    for n in range(nodes):
        node = f"gpu{n:04d}"
        for h in range(hours):
            state = "NODE_FAIL" if rnd.random() < (0.05 if n == 7 else 0.002) else (
                "FAILED" if rnd.random() < 0.05 else "COMPLETED")
            out.append(lemon.JobRow(f"{n}_{h}", f"u{rnd.randrange(50)}", f"p{n % 4}", (node,), state,
                                    state == "FAILED", 8, 3600.0, h * 3600.0 + 3599))
    return out


def main() -> None:
    nodes = int(sys.argv[1]) if len(sys.argv) > 1 else 1000
    rows = jobs(nodes)
    t0 = time.perf_counter()
    doc = lemon.compute(rows)
    took = time.perf_counter() - t0
    print(f"{nodes} nodes, {len(rows):,} jobs: {took:.2f} s; suspects {doc['suspects']}")


if __name__ == "__main__":
    main()
