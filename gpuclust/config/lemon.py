"""Config section [lemon]: the thresholds by which gpuclust.accounting.figures.lemon names the nodes that fail
production jobs beyond chance, and the job parameters its ETTR is priced with.

Kept apart from site.py like health.py: site.py lists LEMON in SECTIONS and calls `lemon_config` once;
`LemonConfig` is re-exported there. Each default is stated once, on its Key; the defaults are the constants the
rule had before it was configurable, so a site without [lemon] gets the same figures.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuclust.config import values as v
from gpuclust.config.schema import Key, ParsedSection, SectionSpec, field_values

DAY_S = 86400


def parse_alpha(text: str) -> float:
    """A significance level strictly between 0 and 1: 0.01 or 1%."""
    value = v.parse_fraction(text)
    if not 0 < value < 1:
        raise ValueError(f"must be a significance level strictly between 0 and 1 (e.g. 0.01 or 1%), got {text!r}")
    return value


def parse_shared_jobs(text: str) -> int:
    value = v.parse_int(text)
    if value < 2:
        raise ValueError(f"must be at least 2 (one job's non-zero exit is that job's own, never the node's), "
                         f"got {text!r}")
    return value


def parse_failure_window(text: str) -> int:
    """A duration of 1 s to 1 day that divides a day, so that windows line up with UTC hours and days."""
    value = v.parse_duration(text)
    if not 1 <= value <= DAY_S:
        raise ValueError(f"must be between 1s and 1d, got {text!r}")
    if DAY_S % value:
        raise ValueError(f"must divide a day evenly (e.g. 10s, 1m, 15m, 1h, 1d) so that windows start on UTC "
                         f"hours, got {text!r} ({value} s)")
    return value


def parse_positive_duration(text: str) -> int:
    value = v.parse_duration(text)
    if value <= 0:
        raise ValueError(f"must be a positive duration (e.g. 30m, 1h or 7d), got {text!r}")
    return value


LEMON = SectionSpec(
    "lemon",
    "Lemon nodes from production jobs (report.json lemon_nodes, `audit partition`): the rule's thresholds and "
    "the checkpoint parameters ETTR is priced with.",
    (
        Key("alpha", parse_alpha, "A node is named when its Holm-corrected one-sided Poisson p-value is under this "
            "(over every judged node, so a larger fleet needs stronger evidence per node).", default=0.01),
        Key("min_failures", v.parse_positive_int, "... and it has at least this many failure windows (a node "
            "that failed once or twice is never named, however few jobs it ran).", default=3),
        Key("min_shared_jobs", parse_shared_jobs, "shared_exit: at least this many GPU jobs ended on the node in "
            "the window, every one with a non-zero exit.", default=2),
        Key("min_shared_users", v.parse_positive_int, "shared_exit: ... of at least this many users (one user's "
            "failing array is that user's bug, not the node's).", default=2),
        Key("failure_window", parse_failure_window, "The window a node's failures are counted in: each window "
            "(UTC-aligned, by a job's End) with a cause is one failure, so a node that dies once and kills its "
            "four jobs fails once. 1s to 1d, dividing a day.", default=3600),
        Key("min_jobs", v.parse_nonneg_int, "A node is judged (tested, and counted in Holm's correction) only "
            "with at least this many GPU jobs in the period.", default=0),
        Key("min_gpu_hours", v.parse_nonneg_float, "... and at least this many GPU-hours allocated on it (a "
            "node with none is never judged).", default=0.0),
        Key("audit_lookback", parse_positive_duration, "`audit partition`'s lemon check: the production jobs of the "
            "accounting store that ended this long before now (--lemon-days overrides it).", default=7 * DAY_S),
        Key("checkpoint_interval", parse_positive_duration, "ETTR: the checkpoint interval of the training "
            "jobs; a failure loses half of it on average.", default=3600),
        Key("default_restore_seconds", v.parse_nonneg_float, "ETTR: the restart (checkpoint restore) time when "
            "the acceptance storage job measured none and no partition has expect_restore_seconds.",
            default=600.0),
    ),
)

# key -> LemonConfig field, where they differ
FIELD_OF_KEY = {"failure_window": "failure_window_s", "checkpoint_interval": "checkpoint_interval_s",
                "default_restore_seconds": "default_restore_s", "audit_lookback": "audit_lookback_s"}


@dataclass(frozen=True)
class LemonConfig:
    """[lemon]: the thresholds that name lemon nodes, and the job parameters ETTR is priced with."""

    alpha: float = LEMON.default("alpha")
    min_failures: int = LEMON.default("min_failures")
    min_shared_jobs: int = LEMON.default("min_shared_jobs")
    min_shared_users: int = LEMON.default("min_shared_users")
    failure_window_s: int = LEMON.default("failure_window")
    min_jobs: int = LEMON.default("min_jobs")
    min_gpu_hours: float = LEMON.default("min_gpu_hours")
    audit_lookback_s: int = LEMON.default("audit_lookback")
    checkpoint_interval_s: int = LEMON.default("checkpoint_interval")
    default_restore_s: float = LEMON.default("default_restore_seconds")


def lemon_config(sections: list[ParsedSection]) -> LemonConfig:
    """The typed [lemon] section (defaults when absent; the schema already reported bad values)."""
    if not sections:
        return LemonConfig()
    return LemonConfig(**field_values(sections[0], LemonConfig, FIELD_OF_KEY))
