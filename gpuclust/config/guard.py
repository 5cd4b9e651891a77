"""Config section [guard]: the rules `gpuclust guard` applies to running GPU jobs whose GPUs sit idle, and the
mail settings its notices go out with (and `report notify`'s, where [notify] sets none: config/mail.py).

Kept apart from site.py like telemetry.py: site.py lists GUARD in SECTIONS and calls `guard_config` once;
`GuardConfig` is re-exported there. The plane that acts on it is gpuclust.guard.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuclust.config import values as v
from gpuclust.config.mail import (  # (re-exported: their first home was here)
    ADDRESS_FIELDS,
    MailConfig,
    mail_config,
    mail_keys,
    parse_address_template,
    parse_host,
    parse_mail_address,
    parse_port,
)
from gpuclust.config.schema import Key, ParsedSection, SectionSpec, field_values
from gpuclust.config.telemetry import parse_percent
from gpuclust.errors import Problem

__all__ = ["ADDRESS_FIELDS", "GUARD", "GuardConfig", "MailConfig", "guard_config", "parse_address_template",
           "parse_host", "parse_mail_address", "parse_port"]

GUARD = SectionSpec(
    "guard",
    "`gpuclust guard`: warn (and, only where set, cancel) running GPU jobs whose GPUs sit idle, and the mail "
    "settings of its notices.",
    (
        Key("idle_threshold", parse_percent, "A GPU under this utilisation (percent, 0-100) is idle (default: "
            "[telemetry] idle_threshold)."),
        Key("lookback", v.parse_duration, "How far back each run reads utilisation; at least cancel_after (a job's "
            "idle time is measured inside it).", default=3 * 3600),
        Key("warn_after", v.parse_duration, "First notice once every GPU of a job has been idle this long.",
            default=3600),
        Key("second_warn_after", v.parse_duration, "Second notice after this long idle (absent: none); between "
            "warn_after and cancel_after."),
        Key("cancel_after", v.parse_duration, "With action = cancel: cancel after this long idle (and never a job "
            "younger than it), with a last notice that says why.", default=2 * 3600),
        Key("action", v.parse_choice("warn", "cancel"), "warn: notices only. cancel: also cancel at cancel_after "
            "(only when the site sets it).", default="warn"),
        Key("exempt_users", v.parse_name_list, "Users whose jobs are never touched.", default=()),
        Key("exempt_accounts", v.parse_name_list, "Accounts whose jobs are never touched.", default=()),
        Key("exempt_partitions", v.parse_name_list, "Partitions whose jobs are never touched.", default=()),
        Key("exempt_qos", v.parse_name_list, "QOS whose jobs are never touched.", default=()),
        Key("user_optout_label", v.parse_str, "A key=value a user may put in the job's --comment to exempt it, "
            "e.g. guard=off (absent: users cannot opt out)."),
        Key("state_dir", v.parse_abs_path, "The guard's state, JSONL action log, lock and mail outbox (default: "
            "[site] state_dir/guard)."),
        Key("textfile_dir", v.parse_abs_path, "node_exporter textfile directory for the run's counters "
            "(gpuclust_guard.prom; absent: not written)."),
        Key("max_clock_skew", v.parse_positive_seconds, "Largest difference between Prometheus's clock and this "
            "host's before a run refuses to act (seconds or 30s).", default=30.0),
        Key("max_staleness", v.parse_positive_seconds, "The newest GPU utilisation sample may be at most this "
            "old; older: telemetry is stale and nothing is acted on.", default=300.0),
        *mail_keys(),
    ),
)

FIELD_OF_KEY = {"idle_threshold": "idle_threshold_pct", "lookback": "lookback_s", "warn_after": "warn_after_s",
                "second_warn_after": "second_warn_after_s", "cancel_after": "cancel_after_s",
                "max_clock_skew": "max_clock_skew_s", "max_staleness": "max_staleness_s",
                "smtp_timeout": "smtp_timeout_s"}


@dataclass(frozen=True)
class GuardConfig:
    """[guard]: the idle-GPU rules `gpuclust guard` applies, who is exempt, its state dir and its mail settings."""

    idle_threshold_pct: float | None = None  # None: [telemetry]'s
    lookback_s: int = GUARD.default("lookback")
    warn_after_s: int = GUARD.default("warn_after")
    second_warn_after_s: int | None = None
    cancel_after_s: int = GUARD.default("cancel_after")
    action: str = GUARD.default("action")
    exempt_users: tuple[str, ...] = GUARD.default("exempt_users")
    exempt_accounts: tuple[str, ...] = GUARD.default("exempt_accounts")
    exempt_partitions: tuple[str, ...] = GUARD.default("exempt_partitions")
    exempt_qos: tuple[str, ...] = GUARD.default("exempt_qos")
    user_optout_label: str | None = None
    state_dir: str | None = None  # None: [site] state_dir/guard
    textfile_dir: str | None = None
    max_clock_skew_s: float = GUARD.default("max_clock_skew")
    max_staleness_s: float = GUARD.default("max_staleness")
    mail: MailConfig = MailConfig()


def guard_config(path: str, sections: list[ParsedSection]) -> tuple[GuardConfig, list[Problem]]:
    """The typed [guard] section (defaults when absent) and the problems between its keys, with file:line."""
    if not sections:
        return GuardConfig(), []
    section = sections[0]
    values = field_values(section, GuardConfig, FIELD_OF_KEY)
    mail = mail_config(section)
    cfg = GuardConfig(**values, mail=mail)
    problems: list[Problem] = []

    def at(key: str) -> int:
        return section.lines.get(key, section.line)

    if cfg.warn_after_s <= 0:
        problems.append(Problem(path, at("warn_after"), "[guard] warn_after must be more than 0"))
    if cfg.second_warn_after_s is not None and not cfg.warn_after_s < cfg.second_warn_after_s < cfg.cancel_after_s:
        problems.append(Problem(path, at("second_warn_after"), "[guard] second_warn_after must lie between "
                                f"warn_after ({cfg.warn_after_s} s) and cancel_after ({cfg.cancel_after_s} s)"))
    if cfg.cancel_after_s <= cfg.warn_after_s:
        problems.append(Problem(path, at("cancel_after"), f"[guard] cancel_after ({cfg.cancel_after_s} s) must be "
                                f"longer than warn_after ({cfg.warn_after_s} s): a job is warned before it is "
                                "cancelled"))
    if cfg.lookback_s < cfg.cancel_after_s:
        problems.append(Problem(path, at("lookback"), f"[guard] lookback ({cfg.lookback_s} s) must be at least "
                                f"cancel_after ({cfg.cancel_after_s} s): idle time is measured inside it"))
    label = cfg.user_optout_label
    if label is not None and (not label or any(c.isspace() for c in label)):
        problems.append(Problem(path, at("user_optout_label"), "[guard] user_optout_label must be one word such "
                                "as guard=off"))
    return cfg, problems
