"""Config section [guard]: the rules `gpuclust guard` applies to running GPU jobs whose GPUs sit idle, and the
mail settings its notices (and later `report notify`) go out with.

Kept apart from site.py like telemetry.py: site.py lists GUARD in SECTIONS and calls `guard_config` once;
`GuardConfig` is re-exported there. The plane that acts on it is gpuclust.guard.
"""

from __future__ import annotations

import string
from dataclasses import dataclass

from gpuclust.config import values as v
from gpuclust.config.schema import Key, ParsedSection, SectionSpec, field_values
from gpuclust.config.telemetry import parse_percent
from gpuclust.errors import Problem

# The fields an address template may name: the job's user and account (a template is read once per notice).
ADDRESS_FIELDS = ("user", "account")


def parse_address_template(text: str) -> str:
    """`{user}@example.org`: an address with {user} (and optionally {account}); any other {field} is refused."""
    raw = text.strip()
    try:
        parsed = list(string.Formatter().parse(raw))
    except ValueError as exc:
        raise ValueError(f"bad template {text!r}: {exc}") from None
    names = [name for _, name, _, _ in parsed if name is not None]
    for _, name, spec, conv in parsed:
        if name is None:
            continue
        if name not in ADDRESS_FIELDS:
            raise ValueError(f"unknown field {{{name}}} in {text!r} (known: "
                             f"{', '.join('{' + f + '}' for f in ADDRESS_FIELDS)})")
        if spec or conv:
            raise ValueError(f"{{{name}}} takes no format spec or conversion in {text!r}")
    if "user" not in names:
        raise ValueError(f"the template must name {{user}}, got {text!r}")
    if raw.count("@") != 1 or any(c.isspace() or ord(c) < 32 for c in raw):
        raise ValueError(f"expected an address like {{user}}@example.org, got {text!r}")
    return raw


def parse_mail_address(text: str) -> str:
    raw = text.strip()
    local, at, domain = raw.rpartition("@")
    if not at or not local or not domain or any(c.isspace() or ord(c) < 32 or c in "<>," for c in raw):
        raise ValueError(f"expected an address like gpuclust@example.org, got {text!r}")
    return raw


def parse_host(text: str) -> str:
    raw = text.strip()
    if not raw or any(c.isspace() or ord(c) < 32 or c in "/@" for c in raw):
        raise ValueError(f"expected a host name or address, got {text!r}")
    return raw


def parse_port(text: str) -> int:
    value = v.parse_positive_int(text)
    if value > 65535:
        raise ValueError(f"expected a TCP port 1-65535, got {text!r}")
    return value


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
        Key("smtp_host", parse_host, "SMTP server the notices go to.", default="localhost"),
        Key("smtp_port", parse_port, "Its port.", default=25),
        Key("smtp_timeout", v.parse_positive_seconds, "Limit of each SMTP conversation step (seconds or 30s); a "
            "slower server keeps the notice in the outbox for the next run.", default=30.0),
        Key("mail_from", parse_mail_address, "From: address of the notices.", default="gpuclust@localhost"),
        Key("address_template", parse_address_template, "A user's address, e.g. {user}@example.org (fields: "
            "{user}, {account})."),
        Key("address_file", v.parse_abs_path, "A file of `user address` lines, read before the template (# "
            "comments)."),
    ),
)

FIELD_OF_KEY = {"idle_threshold": "idle_threshold_pct", "lookback": "lookback_s", "warn_after": "warn_after_s",
                "second_warn_after": "second_warn_after_s", "cancel_after": "cancel_after_s",
                "max_clock_skew": "max_clock_skew_s", "max_staleness": "max_staleness_s",
                "smtp_timeout": "smtp_timeout_s"}


@dataclass(frozen=True)
class MailConfig:
    """Where and how notices are sent (gpuclust.mail)."""

    smtp_host: str = GUARD.default("smtp_host")
    smtp_port: int = GUARD.default("smtp_port")
    smtp_timeout_s: float = GUARD.default("smtp_timeout")
    mail_from: str = GUARD.default("mail_from")
    address_template: str | None = None
    address_file: str | None = None


@dataclass(frozen=True)
class GuardConfig:
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
    mail = MailConfig(**field_values(section, MailConfig, FIELD_OF_KEY))
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
