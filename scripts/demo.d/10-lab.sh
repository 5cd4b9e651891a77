#!/usr/bin/env bash
# A 2-node job with GRES GPUs on the lab, and its accounting record.
set -euo pipefail

echo "Cluster: $(scontrol show config | awk -F'= ' '/^ClusterName/ {print $2}')"
sinfo -N -o '%N %P %T %G'

job=$(sbatch --parsable -N2 --gres=gpu:h100:1 -A physics -J demo-hostname \
    --comment 'team=physics,project=demo' -o /dev/null --wrap 'srun hostname')
echo "Submitted job $job: srun hostname on 2 nodes with gpu:h100:1 each"
# sacct lags a job's end by a few seconds and may first show a placeholder row (JobName "allocation", no
# partition): wait for the settled record.
for _ in $(seq 1 90); do
    IFS='|' read -r state name partition < <(sacct -X -n -P -j "$job" -o State,JobName,Partition | head -n1) || true
    if [[ "$name" == demo-hostname && -n "$partition" ]]; then
        case "$state" in COMPLETED|FAILED|CANCELLED*|TIMEOUT|NODE_FAIL) break ;; esac
    fi
    sleep 1
done
sacct -X -j "$job" -o JobID,JobName,Account,State,NodeList,AllocTRES%70
