"""Typed data contracts: one dataclass per JSON object gpuclust writes, and this module reads and writes
them from the dataclass's own type hints, so a record's fields are declared once.

    write(obj)            the dataclass as plain JSON values (tuples -> lists, datetimes -> ISO 8601 UTC,
                          NaN -> null, nested dataclasses -> objects; an `extra` dict field is merged back)
    read(cls, mapping)    the dataclass from a JSON object, every value checked against its hint:
                          str, int (never a bool), float (an int is taken; finite only), bool, datetime (ISO
                          8601; naive means UTC), X | None, tuple[X, ...], tuple[X, X], dict[str, X],
                          dict[str, Any], a nested dataclass; unknown keys go to an `extra` field if the
                          class has one.

A field is required when it has no default and its hint does not allow None; a missing key or a null takes
the default (None for an optional field). A class attribute NUMBERS_MIN (a ClassVar) is the `min` of all its
numbers. Field metadata refines the check: `min` (numbers, and each
number of a tuple), `below` (an exclusive upper bound), `choices`, `pattern` (a full-match regex for a
string), `size` (the length of a tuple) and `message` (what to say when `choices`/`pattern`/`size` fail);
`deprecated` (why) marks an old name in the JSON Schema.
Errors are ContractError(message, field) naming the dotted field (`attempts[0]: ...`, field `attempts.status`).
"""

from __future__ import annotations

import dataclasses
import math
import re
import types
import typing
from collections.abc import Mapping
from datetime import datetime, timezone
from functools import cache
from typing import Any, TypeVar

T = TypeVar("T")

JSON_SCHEMA_DRAFT = "https://json-schema.org/draft/2020-12/schema"
SCHEMA_BASE = "https://github.com/gpuclust/gpuclust/schemas/"  # the $id prefix of the files in schemas/


class ContractError(ValueError):
    def __init__(self, message: str, field: str | None = None):
        super().__init__(message)
        self.field = field


def format_time(value: datetime) -> str:
    """ISO 8601 in UTC with milliseconds (a naive time is taken as UTC)."""
    if value.tzinfo is None:
        value = value.replace(tzinfo=timezone.utc)
    return value.astimezone(timezone.utc).isoformat(timespec="milliseconds")


def parse_time(text: str) -> datetime:
    """ISO 8601 ('Z' allowed) as an aware UTC datetime; naive means UTC. Raises ValueError/OverflowError."""
    value = datetime.fromisoformat(text.replace("Z", "+00:00"))
    return (value if value.tzinfo else value.replace(tzinfo=timezone.utc)).astimezone(timezone.utc)


# ---- writing ------------------------------------------------------------------------------------------


def plain(value: Any) -> Any:
    """A value as JSON-ready data."""
    kind = type(value)
    if kind is str or kind is int or kind is bool or value is None:  # (most values: as they are)
        return value
    if isinstance(value, datetime):
        return format_time(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return write(value)
    if isinstance(value, (tuple, list)):
        return [plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def write(obj: Any, head: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The dataclass `obj` as a JSON object: `head` first (e.g. the schema tag), then the fields in their
    order, then the keys of an `extra` field (never overriding a field)."""
    out: dict[str, Any] = dict(head or {})
    for f in dataclasses.fields(obj):
        if f.name != "extra":
            out[f.name] = plain(getattr(obj, f.name))
    for key, value in (getattr(obj, "extra", None) or {}).items():
        out.setdefault(key, plain(value))
    return out


# ---- reading ------------------------------------------------------------------------------------------


@cache
def _hints(cls: Any) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


_NAMES = {str: "a string", int: "an integer", float: "a number", bool: "true/false", list: "a list",
          dict: "an object", datetime: "an ISO 8601 time"}


def _optional(hint: Any) -> tuple[Any, bool]:
    """(the hint without None, whether None is allowed)."""
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        allows_none = len(args) < len(typing.get_args(hint))
        return (args[0] if len(args) == 1 else typing.Union[tuple(args)]), allows_none  # noqa: UP007
    return hint, False


def read(cls: type[T], data: Mapping[str, Any], *, ignore: tuple[str, ...] = ("schema", "type")) -> T:
    """`cls` from the JSON object `data` (see the module docstring). Raises ContractError."""
    if not isinstance(data, Mapping):
        raise ContractError(f"must be an object, got {_short(data)}")
    hints = _hints(typing.cast(Any, cls))
    floor = getattr(cls, "NUMBERS_MIN", None)  # a ClassVar: the `min` of every number field of the class
    values: dict[str, Any] = {}
    names = set()
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        names.add(f.name)
        if f.name == "extra":
            continue
        hint, allows_none = _optional(hints[f.name])
        has_default = f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING
        raw = data.get(f.name)
        if raw is None:
            if not has_default and not allows_none:
                raise ContractError(f"missing required key {f.name!r}", f.name)
            if not has_default:
                values[f.name] = None
            continue
        meta = f.metadata if floor is None else {"min": floor, **f.metadata}
        values[f.name] = _value(raw, hint, f.name, meta)
    if "extra" in names:
        values["extra"] = {k: v for k, v in data.items() if k not in names and k not in ignore}
    return cls(**values)


def _value(raw: Any, hint: Any, name: str, meta: Mapping[str, Any]) -> Any:
    origin = typing.get_origin(hint)
    if hint is Any:
        return raw
    if dataclasses.is_dataclass(hint):
        if not isinstance(raw, dict):
            raise ContractError(f"{name!r} must be an object, got {_short(raw)}", name)
        try:
            return read(typing.cast(type, hint), raw, ignore=())
        except ContractError as exc:
            raise ContractError(f"{name}: {exc}", f"{name}.{exc.field}") from None
    if origin is tuple:
        return _tuple(raw, typing.get_args(hint), name, meta)
    if origin is dict:
        if not isinstance(raw, dict):
            raise ContractError(f"{name!r} must be an object, got {_short(raw)}", name)
        value_hint = typing.get_args(hint)[1]
        if value_hint is not Any and not all(isinstance(v, value_hint) and not isinstance(v, bool)
                                             for v in raw.values()):
            raise ContractError(f"{name!r} must map names to {_NAMES.get(value_hint, value_hint)}s"
                                .replace("a strings", "strings").replace("an integers", "integers"), name)
        return dict(raw)
    return _scalar(raw, hint, name, meta)


def _scalar(raw: Any, hint: Any, name: str, meta: Mapping[str, Any]) -> Any:
    if hint is datetime:
        if not isinstance(raw, str):
            raise ContractError(f"{name!r} must be an ISO 8601 time, got {_short(raw)}", name)
        try:
            return parse_time(raw)  # held in UTC: an offset past year 1 or 9999 is refused here, not later
        except (ValueError, OverflowError):
            raise ContractError(f"{name!r} is not an ISO 8601 time: {_short(raw)}", name) from None
    if hint is float:
        if isinstance(raw, bool) or not isinstance(raw, (int, float)):
            raise ContractError(f"{name!r} must be a number, got {_short(raw)}", name)
        try:
            value: Any = float(raw)
        except OverflowError:
            raise ContractError(f"{name!r} is out of range: {_short(raw)}", name) from None
        if not math.isfinite(value):
            raise ContractError(f"{name!r} must be a finite number, got {raw!r}", name)
    elif hint is bool:
        if not isinstance(raw, bool):
            raise ContractError(f"{name!r} must be true/false, got {_short(raw)}", name)
        return raw
    elif hint in (int, str):
        if isinstance(raw, bool) or not isinstance(raw, hint):
            raise ContractError(f"{name!r} must be {_NAMES[hint]}, got {_short(raw)}", name)
        value = raw
    else:  # pragma: no cover - a hint this module does not know is a bug in the model
        raise TypeError(f"unsupported field type {hint!r} for {name}")
    if "min" in meta and isinstance(value, (int, float)) and value < meta["min"]:
        raise ContractError(f"{name!r} must be >= {meta['min']}, got {value!r}", name)
    if "choices" in meta and value not in meta["choices"]:
        message = meta.get("message", f"{name!r} must be one of {', '.join(meta['choices'])}, got {{value}}")
        raise ContractError(message.format(value=_short(value)), name)
    if "pattern" in meta and not re.fullmatch(meta["pattern"], value):
        raise ContractError(meta.get("message", f"{name!r} is malformed: {{value}}").format(value=_short(value)),
                            name)
    return value


def _tuple(raw: Any, args: tuple[Any, ...], name: str, meta: Mapping[str, Any]) -> tuple[Any, ...]:
    if not isinstance(raw, list):
        raise ContractError(f"{name!r} must be a list, got {_short(raw)}", name)
    item = args[0]
    if len(args) != 2 or args[1] is not Ellipsis:  # fixed length: tuple[str, str]
        if len(raw) != len(args):
            raise ContractError(meta.get("message", f"{name!r} must have {len(args)} items, got {{value}}")
                                .format(value=_short(raw)), name)
    if dataclasses.is_dataclass(item):
        out: list[Any] = []
        for i, element in enumerate(raw):
            where = f"{name}[{i}]"
            if not isinstance(element, dict):
                raise ContractError(f"{where} must be an object", name)
            try:
                out.append(read(typing.cast(type, item), element, ignore=()))
            except ContractError as exc:
                raise ContractError(f"{where}: {exc}", f"{name}.{exc.field}") from None
        return tuple(out)
    if item is str:
        if not all(isinstance(v, str) for v in raw):
            raise ContractError(f"{name!r} must be a list of strings", name)
        return tuple(raw)
    if item is float:
        low, below = meta.get("min", -math.inf), meta.get("below", math.inf)
        if not all(isinstance(v, (int, float)) and not isinstance(v, bool) and low <= v < below for v in raw):
            raise ContractError(f"{name!r} must be a list of numbers"
                                + (f" >= {low:g}" if low > -math.inf else ""), name)
        return tuple(float(v) for v in raw)
    return tuple(_value(element, item, f"{name}[{i}]", {}) for i, element in enumerate(raw))


# ---- JSON Schema --------------------------------------------------------------------------------------


def json_schema(cls: type, defs: dict[str, Any]) -> dict[str, Any]:
    """A JSON Schema (draft 2020-12) reference to dataclass `cls`, whose definition (and its nested
    dataclasses') goes into `defs`: the same rules read() applies, so a line read() accepts validates."""
    name = cls.__name__
    if name not in defs:
        defs[name] = {}  # placeholder against recursion
        hints = _hints(typing.cast(Any, cls))
        floor = getattr(cls, "NUMBERS_MIN", None)
        props: dict[str, Any] = {}
        required: list[str] = []
        for f in dataclasses.fields(cls):
            if f.name == "extra":
                continue
            hint, allows_none = _optional(hints[f.name])
            has_default = f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING
            meta = f.metadata if floor is None else {"min": floor, **f.metadata}
            schema = _schema_of(hint, meta, defs)
            props[f.name] = {"anyOf": [schema, {"type": "null"}]} if (allows_none or has_default) else schema
            if "deprecated" in meta:  # an old name kept for a while: JSON Schema's own annotation, and why
                props[f.name] = {**props[f.name], "deprecated": True, "description": meta["deprecated"]}
            if not has_default and not allows_none:
                required.append(f.name)
        doc = (cls.__doc__ or "").strip()
        defs[name] = {"type": "object", **({"description": " ".join(doc.split())} if doc and not doc.startswith(
            f"{name}(") else {}), "properties": props, "required": required}
    return {"$ref": f"#/$defs/{name}"}


def _schema_of(hint: Any, meta: Mapping[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    origin = typing.get_origin(hint)
    if hint is Any:
        return {}
    if dataclasses.is_dataclass(hint):
        return json_schema(typing.cast(type, hint), defs)
    if origin is tuple:
        args = typing.get_args(hint)
        if len(args) == 2 and args[1] is Ellipsis:
            return {"type": "array", "items": _schema_of(args[0], meta, defs)}
        return {"type": "array", "prefixItems": [_schema_of(a, meta, defs) for a in args],
                "minItems": len(args), "maxItems": len(args)}
    if origin is dict:
        value = typing.get_args(hint)[1]
        return {"type": "object", **({} if value is Any else {"additionalProperties": _schema_of(value, {}, defs)})}
    out: dict[str, Any]
    if hint is datetime:
        return {"type": "string", "format": "date-time"}
    if hint is bool:
        return {"type": "boolean"}
    if hint is str:
        out = {"type": "string"}
        if "pattern" in meta:
            out["pattern"] = f"^(?:{meta['pattern']})$"
    elif hint in (int, float):
        out = {"type": "integer" if hint is int else "number"}
        if "min" in meta:
            out["minimum"] = meta["min"]
        if "below" in meta:
            out["exclusiveMaximum"] = meta["below"]
    else:  # pragma: no cover
        raise TypeError(f"unsupported field type {hint!r}")
    if "choices" in meta:
        out["enum"] = list(meta["choices"])
    return out
