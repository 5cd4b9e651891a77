#!/usr/bin/env bash
# Re-record the real Slurm output replayed by tests/unit/test_audit_*.py, from a slurm-lab instance.
#   tests/data/audit/record.sh [LAB_NAME [OUT_DIR]]   (default: audit, tests/data/audit)
# Slurm 22.05 is recorded into tests/data/audit/<scenario>/, later versions into tests/data/audit/<version>/
# (e.g. `record.sh av24 tests/data/audit/24.11`). `scontrol --json show node` is recorded where the version has it.
# Scenarios (each a directory; see README.md):
#   clean/     the lab as `slurm-lab up` leaves it
#   degraded/  node2 drained (long reason), node3 down, node4 with Gres=gpu:h100:2, a 2-GPU job on node1,
#              partition gpu with MaxTime=1-00:00:00 OverSubscribe=FORCE:4 AllowAccounts=physics,ml,ops,
#              QOS gpu-normal GrpTRES=gres/gpu=999 and MaxTRESPU=gres/gpu:h100=64,
#              AccountingStorageTRES without gres/gpu:h100
#   mostly_drained/  node[1-3] drained
#   mig/       the lab with its MIG node5 and shard node6, as `slurm-lab up` leaves it (recorded first, as clean/)
# Everything is restored afterwards (slurm.conf/gres.conf edits, drains, QOS, partition settings).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../../.." && pwd)
name=${1:-audit}
lab="$repo/tests/slurm_lab/slurm-lab"
eval "$("$lab" --name "$name" env)"
etc=$SLURM_LAB_CONF_DIR
cluster=$(scontrol show config | awk '$1=="ClusterName"{print $3}')

out=${2:-$here}
record() {  # record DIR
  local d="$out/$1"; mkdir -p "$d"
  scontrol --version >"$d/scontrol_version.txt"
  scontrol -a -o show partition >"$d/scontrol_a_show_partition_o.txt"
  scontrol -d -o show node >"$d/scontrol_d_show_node_o.txt"
  sinfo --json >"$d/sinfo.json"
  if scontrol --json show node >"$d/scontrol_json_show_node.json" 2>/dev/null; then :; else rm -f "$d/scontrol_json_show_node.json"; fi
  scontrol show config >"$d/scontrol_show_config.txt"
  sacctmgr -P show qos format=Name,GrpTRES,MaxTRES,MaxTRESPerNode,MaxTRESPU,MaxTRESPA >"$d/sacctmgr_show_qos.txt"
  sacctmgr -P show assoc where cluster="$cluster" format=Cluster,Account,User,Partition,GrpTRES,MaxTRES,MaxTRESPerNode,QOS >"$d/sacctmgr_show_assoc.txt"
  echo "$cluster" >"$d/cluster_name.txt"
}

cp "$etc/slurm.conf" /tmp/audit-record-slurm.conf.orig
cp "$etc/gres.conf" /tmp/audit-record-gres.conf.orig
restore() {
  set +e
  scancel --name=audit-record-gpu >/dev/null 2>&1
  cp /tmp/audit-record-slurm.conf.orig "$etc/slurm.conf"
  cp /tmp/audit-record-gres.conf.orig "$etc/gres.conf"
  "$lab" --name "$name" restart >/dev/null
  scontrol update NodeName=node[1-4] State=RESUME >/dev/null 2>&1
  scontrol update PartitionName=gpu MaxTime=INFINITE OverSubscribe=NO AllowAccounts=ALL
  sacctmgr -i modify qos gpu-normal set GrpTRES=gres/gpu=-1 MaxTRESPU=gres/gpu:h100=-1 >/dev/null
  sacctmgr -i modify qos gpu-normal set MaxTRESPU=gres/gpu=8 >/dev/null
  # every node back and responding before the next scenario (a restart leaves one "not responding" for a while)
  for _ in $(seq 150); do sinfo -h -N -o '%T' | grep -qvE '^(idle|mixed|allocated)$' || break; sleep 0.2; done
}
trap restore EXIT

record clean
record mig

# degraded
sacctmgr -i modify qos gpu-normal set GrpTRES=gres/gpu=999 MaxTRESPU=gres/gpu:h100=64 >/dev/null
sed -i -e '/^NodeName=node4 /s/Gres=gpu:h100:4/Gres=gpu:h100:2/' \
       -e 's#^AccountingStorageTRES=.*#AccountingStorageTRES=gres/gpu#' "$etc/slurm.conf"
sed -i -e '/^NodeName=node4 /s/nvidia\[0-3\]/nvidia[0-1]/' "$etc/gres.conf"
"$lab" --name "$name" restart >/dev/null
scontrol update PartitionName=gpu MaxTime=1-00:00:00 OverSubscribe=FORCE:4 AllowAccounts=physics,ml,ops
scontrol update NodeName=node2 State=DRAIN Reason="GPU 3 Xid 79 fallen off the bus, RMA ticket 4711"
scontrol update NodeName=node3 State=DOWN Reason="PSU failure"
sbatch -A ml -p gpu -w node1 --gres=gpu:h100:2 -J audit-record-gpu -o /dev/null --wrap "sleep 300" >/dev/null
for _ in $(seq 50); do squeue -h -n audit-record-gpu -t R | grep -q . && break; sleep 0.2; done
record degraded
scancel --name=audit-record-gpu
restore
trap - EXIT

# mostly drained
trap 'scontrol update NodeName=node[1-3] State=RESUME' EXIT
scontrol update NodeName=node[1-3] State=DRAIN Reason="maintenance window: firmware update"
record mostly_drained
