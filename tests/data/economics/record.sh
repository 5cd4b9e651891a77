#!/bin/sh
# Records the economics lab scenario (run by hand on lab "econ" after the slurm.conf edits in README.md).
# The drain of node4 is started before this script (scontrol update nodename=node4 state=drain reason=...),
# its epoch written to $DRAIN_START_FILE; the script resumes node4 DRAIN_S seconds after it.
set -eu
DRAIN_START_FILE=${DRAIN_START_FILE:-/tmp/econ14-drain-start}
DRAIN_S=${DRAIN_S:-600}
S() { sbatch --parsable -o /dev/null "$@"; }
J1=$(S -A ml -p a100 --gres=gpu:a100:2 -J a100-ok --comment "team=ml units=5" --wrap "sleep 60")
J2=$(S -A ml -p a100 --gres=gpu:a100:1 -J a100-retry --comment "team=ml units=7" --wrap "sleep 20; exit 1")
J4=$(S -A physics -p gpu --gres=gpu:h100:4 -J h100-ok --comment "team=physics" --wrap "sleep 90")
J5=$(S -A physics -p gpu --gres=gpu:h100:2 -J h100-fail --comment "team=physics" --wrap "sleep 30; exit 3")
J6=$(S -A ml -p gpu --gres=gpu:h100:1 -J h100-ml --wrap "sleep 45")
echo "jobs $J1 $J2 $J4 $J5 $J6"
# the retry: resubmitted after the failed attempt ended
while [ "$(sacct -n -X -P -j "$J2" -o State | head -1)" != "FAILED" ]; do sleep 2; done
J3=$(S -A ml -p a100 --gres=gpu:a100:1 -J a100-retry --comment "team=ml units=7" --wrap "sleep 30")
echo "retry $J3"
# refusals: 2 x account_missing, 1 x partition_account, 1 x partition_max_gpus, 1 with a space in the comment
sbatch -p gpu --gres=gpu:h100:1 --wrap "sleep 1" || true
sbatch -p gpu --gres=gpu:h100:1 --comment "units=1 team=x" --wrap "sleep 1" || true
sbatch -A physics -p a100 --gres=gpu:a100:1 --wrap "sleep 1" || true
sbatch -A ml -p a100 --gres=gpu:a100:3 --wrap "sleep 1" || true
START=$(cat "$DRAIN_START_FILE")
while [ "$(date -u +%s)" -lt $((START + DRAIN_S)) ]; do sleep 1; done
scontrol update nodename=node4 state=resume
echo "resumed node4 at $(date -u +%s) (drain started $START)"
