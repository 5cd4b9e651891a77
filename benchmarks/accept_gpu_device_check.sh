#!/usr/bin/env bash
# GPU path of the acceptance harness in one go (NOT yet run on a GPU: no session has been lent one so far).
# World size 1 on one GPU: NCCL backend chosen by ACCEPT_BACKEND=auto, CUDA-event timing, version capture
# (driver from /proc/driver/nvidia/version, CUDA, NCCL, torch, GPU model/UUID), result file written to $OUT.
#
#   OUT=/tmp/gpu-check GPUCLUST_PYTHON=/path/to/python-with-cuda-torch benchmarks/accept_gpu_device_check.sh
#
# Needs a Python with gpuclust importable (run from the repo root) and a CUDA build of torch. No Slurm needed:
# the Slurm variables of a 1-task step are set by hand. Exit 0 = everything checked out.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:?set OUT to an output directory}
PY=${GPUCLUST_PYTHON:-python3}
mkdir -p "$OUT"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"

{ nvidia-smi --query-gpu=name,uuid,driver_version --format=csv 2>&1 || echo "nvidia-smi not available"; } > "$OUT/nvidia-smi.csv"
# Recordings for the health parsers' fixtures (issue 27): the real XML, topology and a health snapshot of this
# node through the same collector the acceptance jobs run (each source ok or unavailable with its reason).
timeout 60 nvidia-smi -q -x > "$OUT/nvidia-smi-q-x.xml" 2> "$OUT/nvidia-smi-q-x.err" || true
timeout 60 nvidia-smi topo -m > "$OUT/nvidia-smi-topo-m.txt" 2>&1 || true
"$PY" -m gpuclust.accept.health snapshot --phase before --job 1 --out "$OUT/health" --node "$(hostname -s)" \
    --nvbandwidth || true
"$PY" - "$OUT/nvml.json" <<'PY' || true
import json, sys
try:
    import pynvml  # nvidia-ml-py
except ImportError:
    json.dump({"nvml": "not importable"}, open(sys.argv[1], "w")); sys.exit(0)
pynvml.nvmlInit()
out = {"driver": pynvml.nvmlSystemGetDriverVersion(), "gpus": []}
for i in range(pynvml.nvmlDeviceGetCount()):
    h = pynvml.nvmlDeviceGetHandleByIndex(i)
    g = {"index": i, "name": pynvml.nvmlDeviceGetName(h)}
    for key, fn in (("pcie_gen", pynvml.nvmlDeviceGetCurrPcieLinkGeneration),
                    ("pcie_gen_max", pynvml.nvmlDeviceGetMaxPcieLinkGeneration),
                    ("pcie_width", pynvml.nvmlDeviceGetCurrPcieLinkWidth),
                    ("pcie_width_max", pynvml.nvmlDeviceGetMaxPcieLinkWidth),
                    ("remapped_rows", pynvml.nvmlDeviceGetRemappedRows),
                    ("throttle_reasons", pynvml.nvmlDeviceGetCurrentClocksThrottleReasons)):
        try:
            g[key] = fn(h)
        except pynvml.NVMLError as exc:
            g[key] = f"error: {exc}"
    out["gpus"].append(g)
json.dump(out, open(sys.argv[1], "w"), indent=1, default=str)
PY
"$PY" - "$OUT/nvidia-smi-q-x.xml" <<'PY' || true
import sys
from gpuclust.accept.health.sources.nvidia_smi import parse_nvidia_smi_xml
log = parse_nvidia_smi_xml(open(sys.argv[1]).read(), source=sys.argv[1])
print("health parser read", len(log.gpus), "GPU(s), driver", log.driver_version)
PY
"$PY" - > "$OUT/capture.json" <<'PY'
import json, torch
from gpuclust.accept import launch
assert torch.cuda.is_available(), "torch.cuda.is_available() is False: this python has no CUDA torch or no GPU"
backend = launch.choose_backend("auto", torch.cuda.is_available())
device = launch.pick_device(torch, backend, 0)
model, uuid = launch.gpu_identity(torch, device)
print(json.dumps({"backend": backend, "device": str(device), "gpu_model": model, "gpu_uuid": uuid,
                  "versions": launch.capture_versions(torch).as_dict(), "device_count": torch.cuda.device_count()},
                 indent=1))
PY
cat "$OUT/capture.json"

export SLURM_JOB_ID=1 SLURM_STEP_ID=0 SLURM_PROCID=0 SLURM_NTASKS=1 SLURM_STEP_NUM_TASKS=1 SLURM_LOCALID=0
export SLURMD_NODENAME=$(hostname -s) SLURM_JOB_NODELIST=$(hostname -s) MASTER_ADDR=127.0.0.1 MASTER_PORT=29512
export ACCEPT_RESULTS_DIR="$OUT" ACCEPT_BACKEND=auto ACCEPT_MIN_SIZE=8 ACCEPT_MAX_SIZE=256M ACCEPT_ITERS=20 ACCEPT_WARMUP=5
export ACCEPT_GPU_DEVICE_GLOB='/dev/nvidia[0-9]*'
"$PY" -m gpuclust.accept.allreduce | tee "$OUT/sweep.txt"

"$PY" - "$OUT" <<'PY'
import sys
from gpuclust.accept.results import load_results
[res] = load_results(sys.argv[1], job="1")
r = res.ranks[0]
checks = {
    "backend is nccl": res.job.backend == "nccl",
    "device is cuda": (r.device or "").startswith("cuda"),
    "no wrong elements": all(s.wrong == 0 for s in res.sweep),
    "busbw 0 at world size 1 (nccl-tests factor 2(n-1)/n)": all(s.busbw_gbps == 0 for s in res.sweep),
    "algbw > 0 (CUDA events timed something)": res.sweep[-1].algbw_gbps > 0,
    "versions captured": all([r.versions.cuda, r.versions.nccl, r.versions.torch]),
    "driver read without nvidia-smi": r.versions.driver is not None,
    "gpu model and uuid": bool(r.gpu_model and r.gpu_uuid and r.gpu_uuid.startswith("GPU-")),
    "torch sees GPUs": r.gpus_seen >= 1,
}
for name, ok in checks.items():
    print(("PASS " if ok else "FAIL ") + name)
print("versions:", r.versions, "model:", r.gpu_model, "uuid:", r.gpu_uuid)
sys.exit(0 if all(checks.values()) else 1)
PY
