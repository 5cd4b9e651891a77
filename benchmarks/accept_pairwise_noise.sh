#!/bin/bash
# Repeat the live "one verdict under CPU load" scenario on a Slurm lab and tally the verdicts.
# Each run: 3 busy-loop processes, tbf 50mbit on one node (cycling node1..node4), a pairwise job, then the same
# job without the throttle (tests/integration/test_accept_lab.py::test_pairwise_under_cpu_load_one_verdict).
#   benchmarks/accept_pairwise_noise.sh LAB RUNS OUTDIR
# OUTDIR/runK/ keeps each run's results files and logs; OUTDIR/tally.txt one line per run.
set -euo pipefail
lab=${1:?lab name}; runs=${2:-4}; out=${3:?out dir}
cd "$(dirname "$0")/.."
mkdir -p "$out"
for (( k = 1; k <= runs; k++ )); do
  node="node$(( (k - 1) % 4 + 1 ))"
  rc=0
  GPUCLUST_LAB_NAME=$lab GPUCLUST_THROTTLE_NODE=$node timeout 900 .venv/bin/pytest -m slurm -q -p no:cacheprovider \
    tests/integration/test_accept_lab.py -k under_cpu_load --basetemp="$out/run$k" > "$out/run$k.log" 2>&1 || rc=$?
  named=$(for f in "$out/run$k"/accept0/results/pairwise-*.jsonl; do
            python3 -c 'import json,sys; j=json.loads(open(sys.argv[1]).readline()); print(j["job_id"], ",".join(j["failed_nodes"]) or "-")' "$f"
          done | tr '\n' ' ')
  echo "run $k throttled $node pytest_rc $rc jobs/named: $named" | tee -a "$out/tally.txt"
done
