"""Exit codes, mapped in one place.

`audit` and `accept report` use Nagios semantics; other commands use 0 success, 1 a negative verdict
(e.g. a policy reject), 2 bad input or usage, 3 when Slurm cannot be reached. `guard` adds 4 when telemetry
cannot be trusted (nothing was acted on) and 75 when another guard run holds its lock.
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
EXIT_BUSY = 75  # EX_TEMPFAIL: guard: another run holds the lock; the next timer run goes on
EXIT_INTERNAL = 70  # EX_SOFTWARE: a bug in gpuclust
