"""Declarative schema for the site config: which sections exist, which keys each takes, and the parser of
each key. Unknown sections and keys are errors with close-match suggestions."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from gpuclust.config.ini import IniDocument, Section
from gpuclust.errors import Problem


@dataclass(frozen=True)
class Key:
    """One key a section takes: its name (or family), parser and documentation, whether required, its default."""

    name: str  # exact key, or a family like "gpu_limit.*" whose suffix is a GRES type
    parse: Callable[[str], Any]
    doc: str
    required: bool = False
    default: Any = None  # the value of an absent key: stated here only (ParsedSection.get, the config dataclasses)

    @property
    def is_family(self) -> bool:
        return self.name.endswith(".*")

    @property
    def family_prefix(self) -> str:
        return self.name[:-1]


@dataclass(frozen=True)
class SectionSpec:
    """One kind of section: its documentation, the keys it takes, and whether it is named and required."""

    kind: str
    doc: str
    keys: tuple[Key, ...]
    named: bool = False  # [partition gpu] is named; [site] is not
    required: bool = False

    def default(self, name: str) -> Any:
        """The default of key `name` (None when it has none)."""
        key = self.key(name)
        if key is None:
            raise KeyError(f"[{self.kind}] has no key {name!r}")
        return key.default

    def key(self, name: str) -> Key | None:
        for key in self.keys:
            if key.name == name or (key.is_family and name.startswith(key.family_prefix) and len(name) > len(key.family_prefix)):
                return key
        return None


@dataclass
class ParsedSection:
    """Values of one section, parsed; `lines` keeps where each came from for later cross-checks."""

    spec: SectionSpec
    name: str | None
    line: int
    values: dict[str, Any] = field(default_factory=dict)
    lines: dict[str, int] = field(default_factory=dict)

    def get(self, key: str) -> Any:
        """The parsed value, or the key's default from its definition."""
        if key in self.values:
            return self.values[key]
        return self.spec.default(key)

    def family(self, prefix: str) -> dict[str, Any]:
        """{'h100': 8} from keys like gpu_limit.h100 = 8 (prefix 'gpu_limit')."""
        dotted = prefix + "."
        return {k[len(dotted):]: v for k, v in self.values.items() if k.startswith(dotted)}


def validate(doc: IniDocument, specs: tuple[SectionSpec, ...]) -> tuple[list[ParsedSection], list[Problem]]:
    by_kind = {spec.kind: spec for spec in specs}
    problems: list[Problem] = list(doc.problems)
    parsed: list[ParsedSection] = []
    for section in doc.sections:
        spec = by_kind.get(section.kind)
        if spec is None:
            problems.append(Problem(doc.path, section.line, f"unknown section kind [{section.kind}]"
                                    + (suggest(section.kind, list(by_kind)) or f"; rename it to one of [{'], ['.join(by_kind)}] or remove it")))
            continue
        if spec.named and not section.name:
            problems.append(Problem(doc.path, section.line, f"section [{spec.kind}] needs a name: write [{spec.kind} NAME]"))
            continue
        if not spec.named and section.name:
            problems.append(Problem(doc.path, section.line, f"section [{spec.kind}] takes no name (got {section.name!r}): write [{spec.kind}]"))
            continue
        parsed.append(_parse_section(doc.path, section, spec, problems))
    present = {p.spec.kind for p in parsed}
    for spec in specs:
        if spec.required and spec.kind not in present and not any(s.kind == spec.kind for s in doc.sections):
            problems.append(Problem(doc.path, None, f"missing required section [{spec.kind}]: add it (`gpuclust config example` shows one)"))
    return parsed, problems


def _parse_section(path: str, section: Section, spec: SectionSpec, problems: list[Problem]) -> ParsedSection:
    out = ParsedSection(spec, section.name, section.line)
    if section.name is not None:
        try:
            _check_name(section.name)
        except ValueError as exc:
            problems.append(Problem(path, section.line, f"{section.title}: {exc}; rename the section"))
    for entry in section.entries.values():
        key = spec.key(entry.key)
        if key is None:
            names = [k.name for k in spec.keys if not k.is_family]
            problems.append(
                Problem(path, entry.line, f"unknown key {entry.key!r} in {section.title}"
                        + (suggest(entry.key, names) or f"; remove it (keys of {section.title}: {', '.join(names)})"), entry.key)
            )
            continue
        if key.is_family:
            try:
                _check_name(entry.key[len(key.family_prefix):])
            except ValueError as exc:
                problems.append(Problem(path, entry.line, f"{entry.key}: {exc}; fix the name", entry.key))
                continue
        try:
            out.values[entry.key] = key.parse(entry.value)
            out.lines[entry.key] = entry.line
        except ValueError as exc:
            problems.append(Problem(path, entry.line, f"{section.title} {entry.key}: {exc}; fix the value", entry.key))
    for key in spec.keys:
        if key.required and key.name not in section.entries:
            problems.append(Problem(path, section.line, f"{section.title} is missing required key {key.name!r}: add "
                                    f"`{key.name} = ...` under {section.title}", key.name))
    return out


def _check_name(name: str) -> None:
    from gpuclust.config.values import parse_slurm_name

    parse_slurm_name(name)


def suggest(word: str, candidates: list[str]) -> str:
    """'; did you mean 'x'? Fix the spelling' for the close matches of word, or ''."""
    import difflib  # (only a config with a misspelt name loads it)

    close = difflib.get_close_matches(word, candidates, n=2, cutoff=0.6)
    return f"; did you mean {' or '.join(repr(c) for c in close)}? Fix the spelling" if close else ""


def field_values(section: ParsedSection, cls: type, field_of_key: Mapping[str, str]) -> dict[str, Any]:
    """A parsed section's values keyed by the dataclass `cls`'s field names (a key maps to its field through
    `field_of_key` where the names differ); keys with no field are left out."""
    names = {f.name for f in fields(cls)}
    out = {field_of_key.get(k, k): v for k, v in section.values.items()}
    return {k: v for k, v in out.items() if k in names}

