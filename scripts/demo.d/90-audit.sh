#!/usr/bin/env bash
# Audit the lab's gpu partition: node state (full drain reasons), homogeneity, QOS/association limits against
# the partition's GPUs, acceptance freshness. Nagios exit codes: 0 OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN.
set -euo pipefail

rc=0
gpuclust audit partition gpu || rc=$?
echo
echo "gpuclust audit partition gpu exited $rc (0 OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN)"
# 3 means the audit could not look at Slurm: that is a broken demo. 1/2 are findings worth showing.
[ "$rc" -le 2 ]

# Today's --json is tomorrow's --baseline: nodes added, removed or reconfigured since then are reported.
baseline=$(mktemp --suffix=.json)
trap 'rm -f "$baseline"' EXIT
gpuclust audit partition gpu --json >"$baseline" || true
echo
echo "Against a baseline saved just now:"
{ gpuclust audit partition gpu --baseline "$baseline" --json || true; } \
    | python3 -c 'import json,sys; [print(" ", f["severity"], f["check"], f["message"]) for f in json.load(sys.stdin)["findings"] if f["check"].startswith("baseline")]'
