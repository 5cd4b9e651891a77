"""`policy replay` over a synthetic year at a large site (issue 47; BENCHMARKS.md, "policy replay over a year").

    PYTHONPATH=. .venv/bin/python benchmarks/bench_policy_replay.py --jobs 1000000

Builds the table gpuclust.accounting.stored_requests gives (REQUEST_COLUMNS) for `--jobs` job rows: 400 users in
40 accounts, three partitions, a third of the submissions arrays of 1-20 tasks, one requeue in fifty, 10% without
a submit line (days stored before SubmitLine), submit lines with job names, scripts and --wrap commands holding
spaces (as sacct prints them), and replays it through two policies (the test lab's and a stricter one). Prints
the wall time of the replay and the process's peak RSS (getrusage, the whole process: table included).
"""

from __future__ import annotations

import argparse
import random
import resource
import time
from pathlib import Path

import pyarrow as pa

from gpuclust.config import load_config
from gpuclust.policy.compile import compile_policy
from gpuclust.policy.evaluate import Evaluator
from gpuclust.policy.replay import replay

SITE = Path(__file__).resolve().parent.parent / "tests" / "data" / "policy" / "lab-site.conf"


def synthetic(jobs: int, seed: int = 47) -> pa.Table:
    rng = random.Random(seed)
    cols: dict[str, list] = {c: [] for c in ("job_id", "job_id_raw", "job_base", "array_task", "het_offset",
                                             "job_name", "user", "account", "partition", "qos", "wckey", "comment",
                                             "state", "submit", "elapsed_s", "nnodes", "alloc_tres", "timelimit_s",
                                             "submit_line", "req_tres")}
    base = 1000
    raw = 10_000_000
    t0 = 1_767_225_600  # 2026-01-01
    while len(cols["job_id"]) < jobs:
        base += 1
        user = f"u{rng.randrange(400):03d}"
        account = ["ml", "physics"][rng.randrange(2)] if rng.random() < 0.9 else f"acct{rng.randrange(40)}"
        part = rng.choice(["gpu", "gpu", "gpu", "debug"])
        gpus = rng.choice([1, 1, 2, 4, 4, 8, 16])
        nodes = max(1, gpus // 4)
        typed = rng.random() < 0.8
        tasks = rng.randrange(1, 21) if rng.random() < 0.33 else 0
        name = f"train {rng.randrange(10_000)}" if rng.random() < 0.3 else f"job{rng.randrange(10_000)}"
        minutes = rng.choice([30, 60, 240, 1440, 2880])
        comment = f"team={account} project=p{rng.randrange(100)}" if rng.random() < 0.95 else ""
        gres = f"gpu:h100:{gpus // nodes}" if typed else f"gpu:{gpus // nodes}"
        if rng.random() < 0.1:
            line = None
        elif rng.random() < 0.5:
            line = (f"sbatch -A {account} -p {part} -N {nodes} --gres={gres} -t {minutes} -J {name} "
                    f"--comment={comment} --wrap python train.py --lr 0.{rng.randrange(100)}")
        else:
            line = f"sbatch --parsable -J {name} /home/{user}/runs/run{rng.randrange(1000)}.sbatch --seed {base}"
        tres = (f"billing={gpus * 8},cpu={gpus * 8},gres/gpu{':h100' if typed else ''}={gpus},"
                f"{'gres/gpu=' + str(gpus) + ',' if typed else ''}mem={gpus * 64}G,node={nodes}")
        submit = t0 + rng.randrange(365 * 86400)
        for task in range(tasks) if tasks else [None]:
            for attempt in range(2 if rng.random() < 0.02 else 1):
                raw += 1
                cols["job_id"].append(f"{base}_{task}" if task is not None else str(base))
                cols["job_id_raw"].append(raw)
                cols["job_base"].append(base)
                cols["array_task"].append(task)
                cols["het_offset"].append(None)
                cols["job_name"].append(name)
                cols["user"].append(user)
                cols["account"].append(account)
                cols["partition"].append(part)
                cols["qos"].append("normal")
                cols["wckey"].append("")
                cols["comment"].append(comment)
                cols["state"].append("REQUEUED" if attempt == 0 and rng.random() < 0.5 else "COMPLETED")
                cols["submit"].append(submit)
                cols["elapsed_s"].append(rng.randrange(60, minutes * 60))
                cols["nnodes"].append(nodes)
                cols["alloc_tres"].append(tres)
                cols["timelimit_s"].append(minutes * 60)
                cols["submit_line"].append(line)
                cols["req_tres"].append(tres)
    n = jobs
    arrays = {k: v[:n] for k, v in cols.items()}
    table = pa.table({k: pa.array(v) for k, v in arrays.items() if k != "submit"})
    table = table.append_column("submit", pa.array(arrays["submit"], pa.int64()).cast(pa.timestamp("s", tz="UTC")))
    for name in ("user", "account", "partition", "qos", "wckey", "comment", "state", "alloc_tres", "req_tres"):
        table = table.set_column(table.schema.get_field_index(name), name, table.column(name).dictionary_encode())
    return table


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=1_000_000)
    args = parser.parse_args()
    t = time.perf_counter()
    table = synthetic(args.jobs)
    built = time.perf_counter() - t
    strict = Path("/tmp/bench-replay-strict.conf")
    strict.write_text(SITE.read_text().replace("max_gpus_per_job = 8", "max_gpus_per_job = 4"))
    evaluators = {"current": Evaluator(compile_policy(load_config(str(SITE)))),
                  "new": Evaluator(compile_policy(load_config(str(strict))))}
    t = time.perf_counter()
    result = replay(table, evaluators, version="24.11")
    took = time.perf_counter() - t
    doc = result.as_dict()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"rows {table.num_rows}, submissions {doc['replayed']['submissions']}, "
          f"from submit line {doc['replayed']['from_submit_line']}, from fields {doc['replayed']['from_fields']}")
    print(f"refused current {doc['configs']['current']['refused']['jobs']} new {doc['configs']['new']['refused']['jobs']}"
          f", changed {doc['changed']['submissions']}")
    print(f"table built in {built:.1f} s; replay {took:.1f} s; peak RSS {peak:.0f} MiB (whole process)")


if __name__ == "__main__":
    main()
