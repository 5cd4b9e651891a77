#!/usr/bin/env bash
# Acceptance: a 4-node all_reduce sweep and a storage run on 4 nodes (checkpoint restored on another node) into the
# site's results dir, then a real fault: node3's link throttled with tc tbf, and the pairwise sweep names it.
set -euo pipefail
cd "${GPUCLUST_REPO:-$(dirname "$0")/../..}"

lab=(tests/slurm_lab/slurm-lab --name "${SLURM_LAB_NAME:-gpuclust}")
common=(-p gpu --gpus-per-node 1 -A ml --comment "team=ml project=acceptance"
        --set "ACCEPT_GPU_DEVICE_GLOB=${SLURM_LAB_STATE}/dev/nvidia[0-9]*")
wait_done() {  # fail the demo with the job's pending reason rather than hang (e.g. a node left drained)
  local j waited
  for j in "$@"; do
    waited=0
    while squeue -h -j "$j" 2>/dev/null | grep -q .; do
      sleep 1; waited=$((waited + 1))
      if (( waited > 900 )); then
        echo "job $j still queued after 900 s: $(squeue -h -j "$j" -o '%T %R')" >&2; sinfo -N -o '%N %T %E' >&2; return 1
      fi
    done
  done
}

echo "--- all_reduce (8 B - 16 MiB) and storage, each on 4 nodes"
ar=$(gpuclust accept submit allreduce -N 4 "${common[@]}" --set ACCEPT_MAX_SIZE=16M --set ACCEPT_ITERS=3 --set ACCEPT_WARMUP=1 | awk '{print $2}')
st=$(gpuclust accept submit storage -N 4 "${common[@]}" --set ACCEPT_CKPT_SIZE=16M --set ACCEPT_STAGE_SIZE=16M \
     --set ACCEPT_AGG_SIZE=8M --set "ACCEPT_LOCAL_DIR=${SLURM_LAB_STATE}/nodes/%n/tmp" | awk '{print $2}')
echo "jobs: allreduce $ar, storage $st"
wait_done "$ar" "$st"
gpuclust accept report --since 10m || true

echo; echo "--- fault: tc tbf 50mbit on node3's eth0, then the pairwise sweep (into a scratch results dir)"
scratch=$(mktemp -d /tmp/gpuclust-demo-accept.XXXXXX)
trap '"${lab[@]}" exec node3 -- tc qdisc del dev eth0 root 2>/dev/null || true' EXIT
"${lab[@]}" exec node3 -- tc qdisc add dev eth0 root tbf rate 50mbit burst 64kbit latency 400ms
pw=$(gpuclust accept submit pairwise -N 4 "${common[@]}" --set ACCEPT_PAIR_BUDGET=2 --set "ACCEPT_RESULTS_DIR=${scratch}" | awk '{print $2}')
wait_done "$pw"
"${lab[@]}" exec node3 -- tc qdisc del dev eth0 root
trap - EXIT
rc=0; gpuclust accept report --job "$pw" --results-dir "$scratch" || rc=$?
echo "accept report exit code: $rc (2 = CRITICAL: node3 named, and only node3)"

echo; echo "--- hardware health: 5% packet loss on node2's link (nftables) and a pending row remap on node4's GPU"
echo "    (the nvidia-smi -q -x stand-in answers with a recorded XML); every node snapshots its counters"
trap '"${lab[@]}" fault node2 clear >/dev/null; "${lab[@]}" fault node4 clear >/dev/null' EXIT
"${lab[@]}" fault node2 loss 5 --direction in
"${lab[@]}" fault node4 nvidia-smi tests/data/accept/health/lab/nvidia-smi-rtx-4000-sff-ada-v13-remap-pending.xml
hw=$(gpuclust accept submit allreduce -N 4 "${common[@]}" --set ACCEPT_MAX_SIZE=16M --set ACCEPT_ITERS=3 \
     --set ACCEPT_WARMUP=1 --set "ACCEPT_RESULTS_DIR=${scratch}" | awk '{print $2}')
wait_done "$hw"
"${lab[@]}" fault node2 clear; "${lab[@]}" fault node4 clear
trap - EXIT
rc=0; gpuclust accept report --job "$hw" --results-dir "$scratch" || rc=$?
echo "accept report exit code: $rc (node2 named [health-link], node4 [health-remap]; node1 and node3 OK)"
gpuclust accept report --job "$hw" --results-dir "$scratch" --drain --dry-run | grep 'scontrol update' || true
