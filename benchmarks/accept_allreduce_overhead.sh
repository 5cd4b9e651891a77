#!/bin/bash
#SBATCH --job-name=accept-bench-overhead
#SBATCH --nodes=4
#SBATCH --ntasks-per-node=1
#SBATCH --time=00:20:00
# Harness overhead: in ONE allocation, alternate the acceptance harness (python -m gpuclust.accept.allreduce)
# and a bare torch.distributed.all_reduce loop (benchmarks/accept_bare_allreduce.py) at the large sizes,
# ROUNDS times each, same ranks, sizes and iterations. Submit from the repo root with the venv active:
#   sbatch -o /tmp/overhead-%j.out --export=ALL,BENCH_OUT=/tmp/overhead benchmarks/accept_allreduce_overhead.sh
# then: .venv/bin/python benchmarks/accept_allreduce_overhead_summary.py /tmp/overhead
set -euo pipefail
out=${BENCH_OUT:?set BENCH_OUT to a directory}
[[ $out =~ ^/[A-Za-z0-9._/+-]*$ ]] || { echo "bad BENCH_OUT" >&2; exit 2; }
rounds=${ROUNDS:-3}; iters=${ITERS:-10}; warmup=${WARMUP:-2}
[[ $rounds =~ ^[0-9]+$ && $iters =~ ^[0-9]+$ && $warmup =~ ^[0-9]+$ ]] || { echo "bad numbers" >&2; exit 2; }
mkdir -p "$out/harness"
export MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
sizes=16777216,33554432,67108864
port=24500
for r in $(seq 1 "$rounds"); do
  MASTER_PORT=$((port++)) ACCEPT_RESULTS_DIR="$out/harness/r$r" ACCEPT_MIN_SIZE=16M ACCEPT_MAX_SIZE=64M \
    ACCEPT_ITERS=$iters ACCEPT_WARMUP=$warmup srun python -m gpuclust.accept.allreduce > /dev/null
  MASTER_PORT=$((port++)) srun python benchmarks/accept_bare_allreduce.py "$sizes" "$iters" "$warmup" > "$out/bare-r$r.jsonl"
done
echo done
