"""Config section [notify]: who `gpuclust report notify` mails and how (gpuclust.accounting.notify).

Kept apart from site.py like guard.py: site.py lists NOTIFY in SECTIONS and calls `notify_config` once, after
[guard], whose mail settings (config/mail.py) every mail key [notify] leaves out takes."""

from __future__ import annotations

from dataclasses import dataclass, field

from gpuclust.config import values as v
from gpuclust.config.mail import MailConfig, mail_config, mail_keys, parse_mail_address, template_fields
from gpuclust.config.schema import Key, ParsedSection, SectionSpec, field_values
from gpuclust.errors import Problem

# The fields a subject template may name (gpuclust.accounting.notify fills them for each mail).
SUBJECT_FIELDS = ("cluster", "name", "kind", "start", "end")
DEFAULT_SUBJECT = "[{cluster}] GPU use of {name}, {start} .. {end}"


def parse_subject_template(text: str) -> str:
    """A subject with {cluster}, {name} (the user or the account), {kind} (user or account), {start}, {end}
    (the period's days); any other {field} is refused."""
    raw = text.strip()
    template_fields(text, SUBJECT_FIELDS)
    if not raw or any(ord(c) < 32 for c in raw):
        raise ValueError(f"expected a one-line subject, got {text!r}")
    return raw


def parse_owners(text: str) -> dict[str, str]:
    """`physics=alice@example.org, ml=bob@example.org`: each account's owner."""
    owners: dict[str, str] = {}
    for account, address in v.parse_label_pairs(text).items():
        owners[account] = parse_mail_address(address)
    return owners


NOTIFY = SectionSpec(
    "notify",
    "`gpuclust report notify`: each user's GPU use over a period (allocated, busy and held-idle GPU-hours, their "
    "cost, the worst jobs and advice) by mail, and each account's to its owner.",
    (
        Key("account_owners", parse_owners, "Account owners who get their account's notice: account=address "
            "pairs, comma-separated (absent, with no account_owners_file: no account notices).", default={}),
        Key("account_owners_file", v.parse_abs_path, "A file of `account address` lines (# comments), read "
            "after account_owners (its line wins)."),
        Key("opt_out", v.parse_name_list, "Users who get no notice (comma-separated).", default=()),
        Key("opt_out_file", v.parse_abs_path, "A file of user names who get no notice, one a line (# comments); "
            "e.g. one that users can add themselves to."),
        Key("subject", parse_subject_template, "Subject of each mail; fields {cluster}, {name} (the user or the "
            "account), {kind} (user or account), {start}, {end} (the period's days).", default=DEFAULT_SUBJECT),
        Key("worst_jobs", v.parse_positive_int, "How many of the recipient's jobs with the most held-idle "
            "GPU-hours each notice lists.", default=5),
        Key("state_dir", v.parse_abs_path, "The notices' outbox (pending/, sent/) and lock (default: [site] "
            "state_dir/notify)."),
        *mail_keys(inherit_from="guard"),
    ),
)

FIELD_OF_KEY: dict[str, str] = {}


@dataclass(frozen=True)
class NotifyConfig:
    """[notify]: whom `report notify` mails (account owners, opt-outs), the subject, and the mail settings."""

    account_owners: dict[str, str] = field(default_factory=dict)
    account_owners_file: str | None = None
    opt_out: tuple[str, ...] = NOTIFY.default("opt_out")
    opt_out_file: str | None = None
    subject: str = NOTIFY.default("subject")
    worst_jobs: int = NOTIFY.default("worst_jobs")
    state_dir: str | None = None  # None: [site] state_dir/notify
    mail: MailConfig = MailConfig()


def notify_config(path: str, sections: list[ParsedSection], guard_mail: MailConfig) -> tuple[NotifyConfig,
                                                                                               list[Problem]]:
    """The typed [notify] section (defaults when absent), its mail settings over [guard]'s `guard_mail`."""
    if not sections:
        return NotifyConfig(mail=guard_mail), []
    section = sections[0]
    values = field_values(section, NotifyConfig, FIELD_OF_KEY)
    values.pop("mail", None)
    return NotifyConfig(**values, mail=mail_config(section, guard_mail)), []
