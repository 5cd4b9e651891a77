#!/bin/sh
# Second part of the economics scenario: node3 is drained while a job runs on it (DRAINING: the job's GPU-hours
# stay allocated, only the rest counts as unavailable), then resumed DRAIN_S seconds after the drain.
set -eu
DRAIN_S=${DRAIN_S:-120}
J=$(sbatch --parsable -o /dev/null -A ml -p a100 -w node3 --gres=gpu:a100:2 -J a100-draining --comment "team=ml" --wrap "sleep 60")
while [ "$(squeue -h -j "$J" -o %T)" != "RUNNING" ]; do sleep 1; done
sleep 5
scontrol update nodename=node3 state=drain reason="econ draining with a job"
START=$(date -u +%s)
echo "job $J; drained node3 at $START"
while [ "$(date -u +%s)" -lt $((START + DRAIN_S)) ]; do sleep 1; done
scontrol update nodename=node3 state=resume
echo "resumed node3 at $(date -u +%s)"
