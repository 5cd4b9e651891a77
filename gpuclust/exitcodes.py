"""Exit codes, mapped in one place.

`audit` and `accept report` use Nagios semantics; other commands use 0 success, 1 a negative verdict
(e.g. a policy reject), 2 bad input or usage, 3 when Slurm cannot be reached. `guard` adds 4 when telemetry
cannot be trusted (nothing was acted on) and 75 when another guard run holds its lock (`report notify` alike).
"""

from __future__ import annotations

from enum import IntEnum


class Nagios(IntEnum):
    OK = 0
    WARNING = 1
    CRITICAL = 2
    UNKNOWN = 3

    @classmethod
    def worst(cls, *states: Nagios) -> Nagios:
        # UNKNOWN ranks below CRITICAL: a known failure beats not knowing.
        order = [cls.OK, cls.UNKNOWN, cls.WARNING, cls.CRITICAL]
        return max(states, key=order.index, default=cls.OK)


EXIT_OK = 0
EXIT_NEGATIVE = 1  # the command worked and its answer is "no" (reject, drift found...)
EXIT_INPUT = 2  # bad config, bad input file, bad usage
EXIT_SLURM = 3  # Slurm unreachable or failing
EXIT_TELEMETRY = 4  # guard: Prometheus down, an error, an empty or stale answer, clock skew: nothing acted on
EXIT_BUSY = 75  # EX_TEMPFAIL: guard, report notify: another run holds the lock; the next timer run goes on
EXIT_INTERNAL = 70  # EX_SOFTWARE: a bug in gpuclust


# `gpuclust health check --mode MODE`: each caller's own convention, here and only here. States (the node's):
#   pass        nothing drain-worthy (WARNING findings print, and pass)
#   fail        a CRITICAL finding; with --drain the check drained the node itself first
#   unchecked   the check could not run (no nvidia-smi on a GPU node, a timeout, unreadable output, no config):
#               never drained by the check; [health] check_unavailable = pass (default) exits as pass, fail as fail
# Exit codes (pass, fail after its own drain, fail without a drain):
#   prolog       0, 1, 1  Slurm drains the node on a non-zero Prolog and requeues the job (the job must not start
#                         on the node even when the check drained it)
#   epilog       0, 0, 1  a non-zero Epilog drains the node with Slurm's own "Epilog error"; after its own drain
#                         the check exits 0 so that its gpuclust:<class> reason stays the node's reason
#   healthcheck  0, 0, 1  slurmd ignores HealthCheckProgram's exit code: the program drains (--drain)
#   nhc          0, 1, 1  the NHC check (examples/nhc/gpuclust_health.nhc) calls NHC's `die` on 1 and only on 1;
#                         NHC drains with its own reason (no --drain under NHC)
#   (no mode)    Nagios: 0 OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN (unchecked, whatever check_unavailable says)
# Bad usage exits EXIT_INPUT (2) in every mode but nhc, where 2 is also "cannot run" to the NHC check: it logs
# and passes.
HEALTH_CHECK_MODES = ("prolog", "epilog", "healthcheck", "nhc")
HEALTH_CHECK_EXIT: dict[str, dict[str, int]] = {
    #               pass  fail+drained  fail
    "prolog": {"pass": 0, "drained": 1, "fail": 1},
    "epilog": {"pass": 0, "drained": 0, "fail": 1},
    "healthcheck": {"pass": 0, "drained": 0, "fail": 1},
    "nhc": {"pass": 0, "drained": 1, "fail": 1},
}


def health_check_exit(mode: str | None, state: str, drained: bool, warning: bool = False,
                      unavailable_fails: bool = False) -> int:
    """The exit code of `gpuclust health check` (the table above). state: pass | fail | unchecked."""
    if mode is None:
        if state == "fail":
            return int(Nagios.CRITICAL)
        if state == "unchecked":
            return int(Nagios.UNKNOWN)
        return int(Nagios.WARNING if warning else Nagios.OK)
    codes = HEALTH_CHECK_EXIT[mode]
    if state == "unchecked":
        return codes["fail"] if unavailable_fails else codes["pass"]
    if state == "fail":
        return codes["drained" if drained else "fail"]
    return codes["pass"]
