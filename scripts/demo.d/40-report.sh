#!/usr/bin/env bash
# Accounting: a few real jobs (a success, a failure and its resubmission), then `report fetch` pulls sacct into
# the Parquet store and `report build` writes report.html / CSV / report.json / gpuclust.prom.
set -euo pipefail

tag="demo$(date +%s)"
common=(-A ml -p gpu --gres=gpu:h100:1 -o /dev/null -e /dev/null -D /tmp --comment "team=ml project=${tag}")
ok=$(sbatch --parsable "${common[@]}" -J "${tag}-ok" --wrap 'sleep 2')
bad=$(sbatch --parsable "${common[@]}" -J "${tag}-train" --wrap 'sleep 1; exit 3')
echo "submitted ${ok} (succeeds) and ${bad} (exits 3)"
wait_for() {  # SECONDS CMD...: poll CMD once a second; fail the demo rather than hang
    local limit=$1; shift
    for _ in $(seq "$limit"); do "$@" && return 0; sleep 1; done
    echo "gave up after ${limit}s waiting for: $*" >&2; return 1
}
failed() { sacct -n -X -j "${bad}" -o State | grep -q FAILED; }
wait_for 120 failed
retry=$(sbatch --parsable "${common[@]}" -J "${tag}-train" --wrap 'sleep 1')
echo "resubmitted ${bad} as ${retry}"
both_completed() { [ "$(sacct -a -n -X -j "${ok},${retry}" -o State | grep -c COMPLETED)" -ge 2 ]; }
wait_for 120 both_completed
sleep 3  # sacct lags a few seconds behind a job's end

out="${TMPDIR:-/tmp}/gpuclust-demo-report"
gpuclust report fetch --period today
gpuclust report build --period today --out "$out"
python3 - "$out/report.json" "$tag" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
mine = [r for r in d["runs"]["by_label"]["project"] if r["project"] == sys.argv[2]]
print("this demo's runs:", json.dumps(mine, indent=1))
print("totals:", json.dumps(d["totals"]))
print("sizing:", json.dumps(d["sizing"]))
PY
echo "open $out/report.html (self-contained; plots embedded)"

echo "== unit economics: the same day with fixed costs, two baselines, node events and the policy's refusals"
log_dir=$(tests/slurm_lab/slurm-lab --name "${SLURM_LAB_NAME:-gpuclust}" env --json \
    | python3 -c 'import json, sys; print(json.load(sys.stdin)["log_dir"])')
econ_conf="${TMPDIR:-/tmp}/gpuclust-demo-economics.conf"
sed "/^\[site\]/a slurmctld_log = ${log_dir}/slurmctld.log" "$GPUCLUST_CONFIG" > "$econ_conf"
cat >> "$econ_conf" <<'CONF'

[costs]
currency = EUR
network = 500
storage = 800
support = 300
operations = 1200

[baseline cloud]
kind = gpu_hour
price_per_gpu_hour = 4.10
speed = 1.0

[baseline api]
kind = unit
price_per_unit = 0.50
CONF
gpuclust --config "$econ_conf" report fetch --period today
gpuclust --config "$econ_conf" report build --period today --out "$out-economics" --format json,html
python3 - "$out-economics/report.json" <<'PY'
import json, sys
e = json.load(open(sys.argv[1]))["economics"]
t = e["total"]
print(f"capacity {e['capacity']}: {t['capacity_gpu_hours']} GPU-hours; completed-run share of capacity "
      f"{t['completed_run_share_of_capacity']}")
for term, v in t["terms"].items():
    print(f"  {term:<17} {v['gpu_hours'] if v['gpu_hours'] is not None else '':>10}  cost {v['cost']}")
print(f"total cost per accepted unit {t['total_cost_per_accepted_unit']} {e['currency']} (accepted unit: "
      + ("completed run)" if e['denominator'] == "runs" else "units=N)"))
for b in e["baselines"]:
    print(f"  vs {b['baseline']}: {b['cost_per_accepted_unit']} per accepted unit, break-even completed-run share "
          f"of capacity {b['break_even_completed_run_share_of_capacity']}")
print("policy refusals today:", e["refusals"].get("total"), "by rule:",
      {r["rule"]: r["refusals"] for r in e["refusals"].get("by_rule", [])})
PY

echo "== GPU use: busy and held-idle GPU-hours from the lab's Prometheus (fake-dcgm stands in for dcgm-exporter)"
if [ -z "${SLURM_LAB_PROMETHEUS:-}" ]; then
    echo "(the lab runs without telemetry: slurm-lab up --telemetry starts it)"
    exit 0
fi
fd="${GPUCLUST_REPO}/.venv/bin/python ${GPUCLUST_REPO}/tests/slurm_lab/fake-dcgm"
busy=$(sbatch --parsable "${common[@]}" -J "${tag}-busy" --gres=gpu:h100:2 --wrap "$fd set --util 85 && sleep 20")
idle=$(sbatch --parsable "${common[@]}" -J "${tag}-idle" --wrap "$fd set --util 0 && sleep 20")
echo "submitted ${busy} (2 GPUs at 85 %) and ${idle} (1 GPU at 0 %)"
use_done() { [ "$(sacct -a -n -X -j "${busy},${idle}" -o State | grep -c COMPLETED)" -ge 2 ]; }
wait_for 180 use_done
sleep 3
use_conf="${TMPDIR:-/tmp}/gpuclust-demo-use.conf"
cp "$GPUCLUST_CONFIG" "$use_conf"
printf '\n[telemetry]\nprometheus_url = %s\nstep = 1\nidle_min = 10s\n' "$SLURM_LAB_PROMETHEUS" >> "$use_conf"
gpuclust --config "$use_conf" report fetch --period today
gpuclust --config "$use_conf" report build --period today --out "$out-use" --format json,html,prom
python3 - "$out-use/report.json" "$busy" "$idle" <<'PY'
import json, sys
u = json.load(open(sys.argv[1]))["gpu_use"]
print("gpu_use totals:", json.dumps(u["totals"]))
print("sources:", json.dumps(u.get("sources")))
PY
grep -E '^gpuclust_report_partition_(busy|held_idle)_gpu_seconds' "$out-use/gpuclust.prom" || true
