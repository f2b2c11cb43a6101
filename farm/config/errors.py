"""One pydantic error as one line: `key.path: what is wrong; what is allowed` (walking the schema)."""

from __future__ import annotations

import types
import typing
from typing import Annotated, Any, Union

from pydantic import BaseModel

from farm.config.schema import SweepConfig


def describe_error(error: dict[str, Any]) -> str:
    """Turn one pydantic error into `key.path: what is wrong; what is allowed`."""
    loc = tuple(error["loc"])
    where = dotted(loc)
    kind = error["type"]
    got = error.get("input")
    if kind == "extra_forbidden":
        allowed = _allowed_keys(loc[:-1])
        hint = f"; allowed keys: {', '.join(allowed)}" if allowed else ""
        return f"{dotted(loc[:-1])}: unknown key {loc[-1]!r}{hint}"
    if kind == "missing" and loc and isinstance(loc[-1], int):  # a too short tuple
        count = f"got {len(got)}" if isinstance(got, (list, tuple)) else "got fewer"
        return f"{dotted(loc[:-1])}: expected {_tuple_length(loc[:-1])} values, {count}"
    if kind == "missing":
        description = _field_description(loc)
        hint = f" ({description})" if description else ""
        parent = f"{dotted(loc[:-1])}: " if loc[:-1] else ""
        return f"{parent}missing key {loc[-1]!r}{hint}"
    if kind == "literal_error":
        return f"{where}: {got!r} is not allowed; {error['msg'].removeprefix('Input should be ')}"
    if kind == "too_short":
        least = (error.get("ctx") or {}).get("min_length", 1)
        return f"{where}: must not be empty" if least == 1 else f"{where}: needs at least {least} values (got {got!r})"
    if kind == "too_long" and isinstance(got, (list, tuple)):
        return f"{where}: expected {_tuple_length(loc) or 'fewer'} values, got {len(got)}"
    if kind in ("model_type", "model_attributes_type", "dict_type"):
        return f"{where}: expected a table (got {got!r})"
    if kind in ("list_type", "tuple_type"):
        return f"{where}: expected a list (got {got!r})"
    message = error["msg"].removeprefix("Value error, ")
    if kind.endswith("_type") or kind.endswith("_parsing") or kind in (
            "greater_than", "greater_than_equal", "less_than", "less_than_equal", "finite_number",
            "string_too_short"):
        message = f"{message} (got {got!r})"
        if isinstance(got, list):
            message += "; one value here: a list sweeps values only in [axes] and [backends.NAME]"
    return f"{where}: {message}"


def _tuple_length(loc: tuple[Any, ...]) -> int | None:
    field = _field_at(loc)
    kind = _unwrap(field.annotation) if field is not None else None
    if typing.get_origin(kind) is tuple and Ellipsis not in typing.get_args(kind):
        return len(typing.get_args(kind))
    return None


def dotted(loc: tuple[Any, ...]) -> str:
    parts: list[str] = []
    for item in loc:
        if isinstance(item, int):
            parts[-1:] = [f"{parts[-1] if parts else ''}[{item}]"]
        elif item in ("function-after", "function-before") or "[" in str(item):
            continue
        else:
            parts.append(str(item))
    return ".".join(parts) or "(top level)"


def _field_at(loc: tuple[Any, ...]) -> Any:
    """The pydantic FieldInfo of the key at `loc` (None if the walk does not reach one)."""
    if not loc or not isinstance(loc[-1], str):
        return None
    if not loc[:-1]:
        return SweepConfig.model_fields.get(loc[-1])
    kind = _kind_at(loc[:-1])
    if isinstance(kind, type) and issubclass(kind, BaseModel):
        return kind.model_fields.get(loc[-1])
    return None


def _field_description(loc: tuple[Any, ...]) -> str | None:
    field = _field_at(loc)
    return field.description if field is not None else None


def _allowed_keys(loc: tuple[Any, ...]) -> list[str]:
    """The keys allowed in the table at `loc`, found by walking the schema's annotations."""
    kind = _kind_at(loc)
    if isinstance(kind, type) and issubclass(kind, BaseModel):
        return list(kind.model_fields)
    return []


def _kind_at(loc: tuple[Any, ...]) -> Any:
    """The type of the value at `loc` (a model, a container or None), walking the annotations."""
    kind: Any = SweepConfig
    for item in loc:
        kind = _unwrap(kind)
        if isinstance(kind, type) and issubclass(kind, BaseModel):
            field = kind.model_fields.get(str(item))
            if field is None:
                return None
            kind = field.annotation
        else:
            origin, args = typing.get_origin(kind), typing.get_args(kind)
            if origin is list:
                kind = args[0]
            elif origin is dict:
                kind = args[1]
            else:
                return None
    return _unwrap(kind)


def _unwrap(kind: Any) -> Any:
    """Strip Annotated and Optional so the walk reaches the model or container inside."""
    while True:
        origin = typing.get_origin(kind)
        if origin is Annotated:
            kind = typing.get_args(kind)[0]
        elif origin in (Union, types.UnionType):
            non_none = [a for a in typing.get_args(kind) if a is not type(None)]
            models = [a for a in non_none if isinstance(a, type) and issubclass(a, BaseModel)]
            kind = models[0] if models else non_none[0]
            if not models and len(non_none) > 1:
                return kind
        else:
            return kind
