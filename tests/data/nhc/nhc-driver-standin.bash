#!/bin/bash
# A stand-in for LBNL NHC's driver (/usr/sbin/nhc), for running a check the way NHC runs it. NHC is not packaged by
# Debian, so the real driver cannot be installed here. What this reproduces, from NHC 1.5's `nhc` (github.com/mej/nhc,
# commit 00f73fb00184e156d78286dc2c808304357f6fea: die(), log(), dbg(), syslog() and nhcmain_run_checks()):
#   - the check runs in NHC's shell (`eval $CHECK`), with log/dbg/syslog/die defined;
#   - die [RC] MSG logs "Health check failed:  MSG", marks the node offline (NHC_RM set, MARK_OFFLINE=1: the
#     node-mark-offline helper; here a line in $NHC_STANDIN_OFFLINE) and exits the driver with RC;
#   - a check that returns non-zero without calling die is failed by the driver ("Check ... returned RC");
#   - exit 127 / 126 from the check ("no such check" / "unable to run") are failures too;
#   - a check that returns 0 passes; the driver then marks the node online and exits 0.
#   - NHC_STANDIN_ERREXIT=1 runs the check under `set -e` (a site's NHC, or a check sourced from a script that
#     sets it): a check must not die of an unguarded failing command there.
# Usage: NHC_STANDIN_OFFLINE=FILE nhc-driver-standin.bash SCRIPT.nhc 'check_name args...'
set -u
LEADER='Health check failed: '
CHECK_DIED=0
DEBUG="${DEBUG:-1}"
function log() { printf '%s\n' "$*"; }
function dbg() { (( DEBUG )) && printf 'DEBUG:  %s\n' "$*" >&2; return 0; }
function syslog() { printf 'SYSLOG: %s\n' "$*" >&2; return 0; }
function die() {
    local RET=1
    if [[ -n "${1:-}" && "$1" == +([0-9]) ]]; then RET="$1"; shift; fi
    CHECK_DIED=1
    log "$LEADER $*"
    syslog "$LEADER $*"
    printf '%s\n' "$LEADER $*" >> "$NHC_STANDIN_OFFLINE"
    exit "$RET"
}
shopt -s extglob
. "$1"
CHECK="$2"
if [[ "${NHC_STANDIN_ERREXIT:-0}" == 1 ]]; then
    set -e
    eval $CHECK
    RET=$?
    set +e
else
    eval $CHECK
    RET=$?
fi
if (( RET == 127 || RET == 126 )); then
    die $RET "No such check or unable to run \"${CHECK%% *}\"; check returned $RET"
elif (( RET != 0 )) && (( CHECK_DIED == 0 )); then
    log "Node Health Check failed.  Check ($CHECK) returned $RET"
    die $RET "Check $CHECK returned $RET"
fi
exit 0
