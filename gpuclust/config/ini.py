"""A small INI reader that remembers the line of every section and key, so each config error can name
`file:line`. (configparser forgets lines.)

Syntax: `[kind]` or `[kind name]` headers; `key = value`; full-line comments start with `#` or `;`;
an inline comment starts with whitespace then `#`; an indented line continues the previous value.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from gpuclust.errors import Problem

_HEADER = re.compile(r"^\[\s*([A-Za-z_][A-Za-z0-9_]*)(?:\s+([^\]\s]+))?\s*\]$")
_KEY = re.compile(r"^([A-Za-z_][A-Za-z0-9_.\-]*)\s*[=:]\s*(.*)$")
# An inline comment: a `#` or `;` right after whitespace. Found by one linear search (the old
# `\s+[#;].*$` substitution backtracked over every run of spaces: quadratic in a line's length).
_INLINE_COMMENT_START = re.compile(r"(?<=\s)[#;]")
UTF8_BOM = "\ufeff"


def strip_inline_comment(text: str) -> str:
    """`text` without its inline comment (whitespace then `#` or `;` to the end of the line), stripped."""
    match = _INLINE_COMMENT_START.search(text)
    return (text[: match.start()] if match else text).strip()


def decode_config(data: bytes, path: str) -> tuple[str, list[Problem]]:
    """A config file's bytes as text: a leading UTF-8 byte order mark is dropped; a line that is not UTF-8
    is reported as `file:line` (and decoded with replacement characters, so the rest of the file is still
    read and checked)."""
    problems: list[Problem] = []
    if b"\0" in data[:8192]:  # a binary file given by mistake: one message, not one per line of noise
        return "", [Problem(path, None, "not a text file (it holds NUL bytes): give the INI site config; "
                                        "`gpuclust config example` prints one to start from")]
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        lines = data.split(b"\n")
        decoded = []
        for lineno, raw in enumerate(lines, start=1):
            try:
                decoded.append(raw.decode("utf-8"))
            except UnicodeDecodeError as exc:
                bad = raw[exc.start : exc.start + 1]
                problems.append(Problem(path, lineno, f"not UTF-8: byte {bad!r} at column {exc.start + 1}; "
                                                      "save the file as UTF-8"))
                decoded.append(raw.decode("utf-8", "replace"))
        text = "\n".join(decoded)
    if text.startswith(UTF8_BOM):
        text = text[1:]
    return text, problems


@dataclass
class Entry:
    """One `key = value` of a section, and its line."""

    key: str
    value: str
    line: int


@dataclass
class Section:
    """One section (`[kind]` or `[kind name]`), its line and its entries."""

    kind: str
    name: str | None
    line: int
    entries: dict[str, Entry] = field(default_factory=dict)

    @property
    def title(self) -> str:
        return f"[{self.kind} {self.name}]" if self.name else f"[{self.kind}]"


@dataclass
class IniDocument:
    """A file as read: its sections in order, and the problems reading it found."""

    path: str
    sections: list[Section]
    problems: list[Problem]


def parse_ini(text: str, path: str, problems: list[Problem] | None = None) -> IniDocument:
    """`problems`: found before (e.g. by `decode_config`); the document's own are added after them."""
    if text.startswith(UTF8_BOM):
        text = text[1:]
    sections: list[Section] = []
    problems = list(problems or [])
    seen_titles: dict[tuple[str, str | None], int] = {}
    current: Section | None = None
    last: Entry | None = None
    for lineno, raw in enumerate(text.splitlines(), start=1):
        stripped = raw.strip()
        if not stripped or stripped[0] in "#;":
            continue
        if raw[0] in " \t" and last is not None:
            more = strip_inline_comment(stripped)
            last.value = f"{last.value} {more}".strip() if last.value else more
            continue
        last = None
        if stripped.startswith("["):
            match = _HEADER.match(stripped)
            if not match:
                problems.append(Problem(path, lineno, f"bad section header {stripped!r}; use [kind] or [kind name]"))
                current = None
                continue
            kind, name = match.group(1), match.group(2)
            ident = (kind, name)
            if ident in seen_titles:
                problems.append(Problem(path, lineno, f"duplicate section {stripped} (first at line {seen_titles[ident]}); merge the two"))
            seen_titles[ident] = lineno
            current = Section(kind, name, lineno)
            sections.append(current)
            continue
        match = _KEY.match(stripped)
        if not match:
            problems.append(Problem(path, lineno, f"expected 'key = value', got {stripped!r:.80}; fix the line or comment it out with #"))
            continue
        if current is None:
            problems.append(Problem(path, lineno, f"key {match.group(1)!r} is outside any [section]; move it under its section (e.g. [site])"))
            continue
        key, value = match.group(1), strip_inline_comment(match.group(2))
        if key in current.entries:
            problems.append(
                Problem(path, lineno, f"duplicate key {key!r} in {current.title} (first at line {current.entries[key].line}); "
                                     "keep one of them")
            )
        last = Entry(key, value, lineno)
        current.entries[key] = last
    return IniDocument(path, sections, problems)
