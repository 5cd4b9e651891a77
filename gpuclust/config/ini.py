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
_INLINE_COMMENT = re.compile(r"\s+[#;].*$")


@dataclass
class Entry:
    key: str
    value: str
    line: int


@dataclass
class Section:
    kind: str
    name: str | None
    line: int
    entries: dict[str, Entry] = field(default_factory=dict)

    @property
    def title(self) -> str:
        return f"[{self.kind} {self.name}]" if self.name else f"[{self.kind}]"


@dataclass
class IniDocument:
    path: str
    sections: list[Section]
    problems: list[Problem]


def parse_ini(text: str, path: str) -> IniDocument:
    sections: list[Section] = []
    problems: list[Problem] = []
    seen_titles: dict[tuple[str, str | None], int] = {}
    current: Section | None = None
    last: Entry | None = None
    for lineno, raw in enumerate(text.splitlines(), start=1):
        stripped = raw.strip()
        if not stripped or stripped[0] in "#;":
            continue
        if raw[0] in " \t" and last is not None:
            more = _INLINE_COMMENT.sub("", stripped)
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
                problems.append(Problem(path, lineno, f"duplicate section {stripped} (first at line {seen_titles[ident]})"))
            seen_titles[ident] = lineno
            current = Section(kind, name, lineno)
            sections.append(current)
            continue
        match = _KEY.match(stripped)
        if not match:
            problems.append(Problem(path, lineno, f"expected 'key = value', got {stripped!r}"))
            continue
        if current is None:
            problems.append(Problem(path, lineno, f"key {match.group(1)!r} is outside any [section]"))
            continue
        key, value = match.group(1), _INLINE_COMMENT.sub("", match.group(2)).strip()
        if key in current.entries:
            problems.append(
                Problem(path, lineno, f"duplicate key {key!r} in {current.title} (first at line {current.entries[key].line})")
            )
        last = Entry(key, value, lineno)
        current.entries[key] = last
    return IniDocument(path, sections, problems)
