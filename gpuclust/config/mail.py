"""The mail settings shared by [guard] and [notify]: one declaration of the keys (mail_keys) and one typed value
(MailConfig). [guard] states them with their defaults; [notify] states the same keys without defaults, so an
absent one is [guard]'s (mail_config)."""

from __future__ import annotations

import dataclasses
import string
from dataclasses import dataclass
from typing import Any

from gpuclust.config import values as v
from gpuclust.config.schema import Key, ParsedSection

# The fields an address template may name: the job's user and account (a template is read once per notice).
ADDRESS_FIELDS = ("user", "account")


def template_fields(text: str, known: tuple[str, ...]) -> list[str]:
    """The {field}s a template names (text stripped), each one of `known`, with no format spec or conversion;
    ValueError naming the first that is not (a config check reports it with file:line)."""
    try:
        parsed = list(string.Formatter().parse(text.strip()))
    except ValueError as exc:
        raise ValueError(f"bad template {text!r}: {exc}") from None
    names = []
    for _, name, spec, conv in parsed:
        if name is None:
            continue
        if name not in known:
            raise ValueError(f"unknown field {{{name}}} in {text!r} (known: "
                             f"{', '.join('{' + f + '}' for f in known)})")
        if spec or conv:
            raise ValueError(f"{{{name}}} takes no format spec or conversion in {text!r}")
        names.append(name)
    return names


def parse_address_template(text: str) -> str:
    """`{user}@example.org`: an address with {user} (and optionally {account}); any other {field} is refused."""
    raw = text.strip()
    names = template_fields(text, ADDRESS_FIELDS)
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


# key -> (parser, doc, default)
_MAIL_KEYS: tuple[tuple[str, Any, str, Any], ...] = (
    ("smtp_host", parse_host, "SMTP server the notices go to.", "localhost"),
    ("smtp_port", parse_port, "Its port.", 25),
    ("smtp_timeout", v.parse_positive_seconds, "Limit of each SMTP conversation step (seconds or 30s); a slower "
     "server keeps the notice in the outbox for the next run.", 30.0),
    ("mail_from", parse_mail_address, "From: address of the notices.", "gpuclust@localhost"),
    ("address_template", parse_address_template, "A user's address, e.g. {user}@example.org (fields: {user}, "
     "{account}).", None),
    ("address_file", v.parse_abs_path, "A file of `user address` lines, read before the template (# comments).",
     None),
)
MAIL_KEY_NAMES = tuple(name for name, _, _, _ in _MAIL_KEYS)
FIELD_OF_KEY = {"smtp_timeout": "smtp_timeout_s"}
_DEFAULTS = {name: default for name, _, _, default in _MAIL_KEYS}


def mail_keys(inherit_from: str | None = None) -> tuple[Key, ...]:
    """The mail keys of a section: with their defaults, or (inherit_from: the section whose values an absent key
    takes) without."""
    if inherit_from is None:
        return tuple(Key(name, parse, doc, default=default) for name, parse, doc, default in _MAIL_KEYS)
    return tuple(Key(name, parse, f"{doc} (default: [{inherit_from}] {name})") for name, parse, doc, _ in _MAIL_KEYS)


@dataclass(frozen=True)
class MailConfig:
    """Where and how notices are sent (gpuclust.mail)."""

    smtp_host: str = _DEFAULTS["smtp_host"]
    smtp_port: int = _DEFAULTS["smtp_port"]
    smtp_timeout_s: float = _DEFAULTS["smtp_timeout"]
    mail_from: str = _DEFAULTS["mail_from"]
    address_template: str | None = None
    address_file: str | None = None


def mail_config(section: ParsedSection | None, base: MailConfig | None = None) -> MailConfig:
    """The section's mail settings: its keys where given, else `base`'s (None: the defaults)."""
    out = base or MailConfig()
    if section is None:
        return out
    given = {FIELD_OF_KEY.get(k, k): val for k, val in section.values.items() if k in MAIL_KEY_NAMES}
    return dataclasses.replace(out, **given)
