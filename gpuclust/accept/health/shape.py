"""The data shapes of health snapshots: each source declares its `ok` data as a JSON Schema (draft 2020-12)
next to its parser (`Source.shape`), built with the helpers here; `check` is the one place they are checked,
when `accept report` reads a snapshot file (gpuclust.accept.health.collect.load_snapshots).

Only the keywords the sources use are understood: type (a name or a list of names), properties, required,
additionalProperties, items, enum, minimum, maximum. `check` is stricter than a JSON Schema validator in two
places, both about what the rules can use: an integer is a JSON integer (never 1.0, never true), and a
number is finite (NaN and Infinity, which Python's json module reads, are refused). Every integer is bounded
(INT_MIN..INT_MAX: the 64-bit counters the kernel and the drivers keep) and every other number too (NUM_MAX),
so a number that is no counter is refused at read time instead of failing later in an arithmetic or a
conversion.

The schemas only ever recurse along their own structure, so a value nested deeper than its schema is never
walked (a hostile file cannot make the check recurse without end).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

INT_MIN = -(2**63)  # signed 64-bit (the kernel's signed MIB values, e.g. Tcp MaxConn -1)
INT_MAX = 2**64 - 1  # unsigned 64-bit (the counters)
NUM_MAX = 1e15  # watts, degrees, Gb/s, GB/s: far above any real reading, far below float's overflow

Schema = dict[str, Any]

# ---- builders ------------------------------------------------------------------------------------------


def integer(nullable: bool = False) -> Schema:
    return {"type": ["integer", "null"] if nullable else "integer", "minimum": INT_MIN, "maximum": INT_MAX}


def number(nullable: bool = False) -> Schema:
    return {"type": ["number", "null"] if nullable else "number", "minimum": -NUM_MAX, "maximum": NUM_MAX}


def string(nullable: bool = False, enum: Sequence[str] | None = None) -> Schema:
    out: Schema = {"type": ["string", "null"] if nullable else "string"}
    if enum is not None:
        out["enum"] = [*enum, *([None] if nullable else [])]
    return out


def boolean(nullable: bool = False) -> Schema:
    return {"type": ["boolean", "null"] if nullable else "boolean"}


def obj(properties: Mapping[str, Schema], required: Sequence[str] = ()) -> Schema:
    """An object with these keys (others allowed: a newer collector may add some)."""
    return {"type": "object", "properties": dict(properties), "required": list(required)}


def map_of(values: Schema) -> Schema:
    """An object whose every value has this shape: {name: value}."""
    return {"type": "object", "additionalProperties": values}


def list_of(items: Schema) -> Schema:
    return {"type": "array", "items": items}


# ---- the check -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ShapeError:
    """The first place a value does not fit its schema: `field` is the dotted path (gpus[0].pcie.gen_max),
    '' for the value itself."""

    field: str
    message: str

    def __str__(self) -> str:
        return f"{self.field}: {self.message}" if self.field else self.message


_TYPE_NAMES = {"integer": "an integer", "number": "a number", "string": "a string", "boolean": "true/false",
               "null": "null", "object": "an object", "array": "a list"}


def _short(value: Any) -> str:
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > 10**30:
        return f"an integer of about {int(value.bit_length() * 0.30103) + 1} digits"  # never str(): digit limit
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _is(value: Any, name: str) -> bool:
    if name == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if name == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if name == "string":
        return isinstance(value, str)
    if name == "boolean":
        return isinstance(value, bool)
    if name == "null":
        return value is None
    if name == "object":
        return isinstance(value, dict)
    if name == "array":
        return isinstance(value, list)
    raise ValueError(f"schema type {name!r} is not understood here")  # pragma: no cover - a bug in a schema


def _join(path: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]"
    return f"{path}.{key}" if path else key


def check(schema: Mapping[str, Any], value: Any, path: str = "") -> ShapeError | None:
    """The first misfit of `value` against `schema` (see the module docstring), or None."""
    types = schema.get("type")
    if types is not None:
        names = [types] if isinstance(types, str) else list(types)
        if not any(_is(value, n) for n in names):
            want = " or ".join(_TYPE_NAMES[n] for n in names)
            return ShapeError(path, f"must be {want}, got {_short(value)}")
    if "enum" in schema and value not in schema["enum"]:
        return ShapeError(path, f"must be one of {', '.join(str(v) for v in schema['enum'])}, got {_short(value)}")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if isinstance(value, float) and not math.isfinite(value):
            return ShapeError(path, f"must be a finite number, got {value!r}")
        low, high = schema.get("minimum"), schema.get("maximum")
        if (low is not None and value < low) or (high is not None and value > high):
            return ShapeError(path, f"out of range: {_short(value)}")
    if isinstance(value, dict):
        for key in schema.get("required", ()):
            if key not in value:
                return ShapeError(_join(path, key), "missing")
        props = schema.get("properties", {})
        extra = schema.get("additionalProperties", True)
        for key, item in value.items():
            sub = props.get(key, extra)
            if sub is False:
                return ShapeError(_join(path, key), "not expected here")
            if isinstance(sub, Mapping):
                found = check(sub, item, _join(path, key))
                if found is not None:
                    return found
    if isinstance(value, list) and isinstance(schema.get("items"), Mapping):
        for i, item in enumerate(value):
            found = check(schema["items"], item, _join(path, i))
            if found is not None:
                return found
    return None
