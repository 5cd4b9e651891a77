#!/bin/bash
#SBATCH --job-name=accept-bench-overhead
#SBATCH --nodes=4
#SBATCH --ntasks-per-node=1
#SBATCH --time=00:20:00
# Harness overhead: in ONE allocation, alternate the acceptance harness (python -m gpuclust.accept.allreduce)
# and a bare torch.distributed.all_reduce loop (benchmarks/accept_bare_allreduce.py) at the large sizes,
# ROUNDS times each, same ranks, sizes and iterations. Paired and alternating: odd rounds run the harness
# first, even rounds the bare loop first (ABBA), so a drift of the host's load over time or a "second srun of
# the round" effect cancels out instead of landing on one side; the summary compares each round's pair.
# BARE_CHECK=1 adds a third program per round: the bare loop preceded by the harness's correctness step
# (pattern fill, one all_reduce, element check) at each size, to isolate that step's effect. Submit from the repo root with the venv active:
#   sbatch -o /tmp/overhead-%j.out --export=ALL,BENCH_OUT=/tmp/overhead benchmarks/accept_allreduce_overhead.sh
# then: .venv/bin/python benchmarks/accept_allreduce_overhead_summary.py /tmp/overhead
set -euo pipefail
out=${BENCH_OUT:?set BENCH_OUT to a directory}
[[ $out =~ ^/[A-Za-z0-9._/+-]*$ ]] || { echo "bad BENCH_OUT" >&2; exit 2; }
rounds=${ROUNDS:-3}; iters=${ITERS:-10}; warmup=${WARMUP:-2}
[[ $rounds =~ ^[0-9]+$ && $iters =~ ^[0-9]+$ && $warmup =~ ^[0-9]+$ ]] || { echo "bad numbers" >&2; exit 2; }
mkdir -p "$out/harness"
export MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
max=${MAX_SIZE:-64M}  # 16M: the 16 MiB size alone (shorter rounds, so more of them)
case $max in
  16M) sizes=16777216 ;;
  32M) sizes=16777216,33554432 ;;
  64M) sizes=16777216,33554432,67108864 ;;
  *) echo "MAX_SIZE must be 16M, 32M or 64M" >&2; exit 2 ;;
esac
port=24500
harness() {
  MASTER_PORT=$((port++)) ACCEPT_RESULTS_DIR="$out/harness/r$1" ACCEPT_MIN_SIZE=16M ACCEPT_MAX_SIZE=$max \
    ACCEPT_ITERS=$iters ACCEPT_WARMUP=$warmup srun python -m gpuclust.accept.allreduce > /dev/null
}
bare() {
  MASTER_PORT=$((port++)) srun python benchmarks/accept_bare_allreduce.py "$sizes" "$iters" "$warmup" $2 \
    > "$out/bare$3-r$1.jsonl"
}
for r in $(seq 1 "$rounds"); do
  if (( r % 2 )); then harness "$r"; bare "$r" "" ""; else bare "$r" "" ""; harness "$r"; fi
  if [[ ${BARE_CHECK:-0} == 1 ]]; then bare "$r" --check -check; fi
  echo "round $r $(date +%T)"
done
echo done
