#!/usr/bin/env bash
# 20-policy: the site config becomes a job_submit.lua running in slurmctld, `policy check` decides the same way,
# and the GPU quotas become a sacctmgr plan. Restores the pass-through job_submit.lua on exit.
set -euo pipefail
cd "$(dirname "$0")/../.."
LAB=tests/slurm_lab/slurm-lab
NAME=${SLURM_LAB_NAME:-gpuclust}
CLUSTER=${SLURM_LAB_CLUSTER:-$NAME}
tmp=$(mktemp -d)
trap '"$LAB" --name "$NAME" policy default >/dev/null 2>&1 || true; rm -rf "$tmp"' EXIT
# A policy config for this lab: accounts physics/ml, partition gpu (h100), labels team+project required.
sed "s/^cluster_name = .*/cluster_name = ${CLUSTER}/" tests/data/policy/lab-site.conf > "$tmp/site.conf"
G=(gpuclust --config "$tmp/site.conf")

echo "== render the policy and install it in slurmctld"
"${G[@]}" policy render --out "$tmp/job_submit.lua"
"$LAB" --name "$NAME" policy "$tmp/job_submit.lua"
sleep 1.1  # slurmctld re-reads the script by mtime (1 s granularity)

echo "== a compliant job is accepted"
id=$(sbatch --parsable -A physics --gres=gpu:h100:1 --comment team=physics,project=demo -t 5 -o /dev/null --wrap true)
echo "accepted: job $id"
scancel "$id" || true

echo "== non-compliant jobs are rejected by slurmctld, with the rule and the fix"
try() { echo "\$ sbatch $*"; sbatch -o /dev/null "$@" --wrap true 2>&1 | sed 's/^/    /' || true; }
try --gres=gpu:h100:1 --comment team=physics,project=demo
try -A physics --gres=gpu:2 --comment team=physics,project=demo
try -A physics --gres=gpu:h100:1 --comment team=chem,project=demo
try -A ml -N 3 --gres=gpu:h100:4 --comment team=ml,project=demo

echo "== gpuclust policy check decides exactly like the Lua (exit 1 = reject)"
"${G[@]}" policy check --user "$(id -un)" -- -A physics --gres=gpu:2 --comment team=physics,project=demo || true

echo "== GPU quotas: sacctmgr commands that bring slurmdbd in line with the config (nothing is applied here)"
"${G[@]}" policy quotas plan || true

echo "== over the account's GPU quota: accepted by the policy, held by slurmdbd's GrpTRES"
id=$(sbatch --parsable -A physics -N 2 --gres=gpu:h100:4 --comment team=physics,project=big -t 5 -o /dev/null --wrap true)
for _ in $(seq 20); do
  reason=$(squeue -h -j "$id" -o %r)
  [[ "$reason" == "None" || "$reason" == "Priority" || -z "$reason" ]] || break
  sleep 0.5
done
squeue -j "$id" -o "%.8i %.10T %.20r %b"
scancel "$id" || true
