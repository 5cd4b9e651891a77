#!/usr/bin/env bash
# A 2-node job with GRES GPUs on the lab, and its accounting record.
set -euo pipefail

echo "Cluster: $(scontrol show config | awk -F'= ' '/^ClusterName/ {print $2}')"
sinfo -N -o '%N %P %T %G'

job=$(sbatch --parsable -N2 --gres=gpu:h100:1 -A physics -J demo-hostname \
    --comment 'team=physics,project=demo' -o /dev/null --wrap 'srun hostname')
echo "Submitted job $job: srun hostname on 2 nodes with gpu:h100:1 each"
for _ in $(seq 1 60); do
    state=$(sacct -X -n -P -j "$job" -o State | head -n1)
    case "$state" in COMPLETED|FAILED|CANCELLED*|TIMEOUT|NODE_FAIL) break ;; esac
    sleep 1
done
sacct -X -j "$job" -o JobID,JobName,Account,State,NodeList,AllocTRES%70
