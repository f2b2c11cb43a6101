"""How a sweep file's keys and values are written back in messages and generated TOML: a message
names the key as the user would type it (`models[0].inputs."input.1".range`), quoted where TOML
needs quotes."""

from __future__ import annotations

import json
import re
from typing import Any

_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")


def toml_key(key: str) -> str:
    """A TOML key as written in a file: bare where TOML allows it, else a quoted string."""
    if _BARE_KEY.fullmatch(key):
        return key
    return toml_key_value(key)


def toml_key_value(value: str) -> str:
    """A string as a TOML value (a basic string)."""
    return json.dumps(value, ensure_ascii=False).replace("\x7f", "\\u007F")  # TOML escapes DEL too


def toml_inline_table(values: dict[str, Any]) -> str:
    return "{ " + ", ".join(f"{toml_key(k)} = {json.dumps(v)}" for k, v in values.items()) + " }"


def parse_axis_key(key: str, input_names) -> tuple[str, int] | None:
    """("INPUT", AXIS) when `key` is "INPUT:AXIS" for one of the inputs, else None (a name)."""
    name, sep, axis = key.rpartition(":")
    if sep and name in input_names and axis.isascii() and axis.isdigit():
        return name, int(axis)
    return None


def shape_text(shape: tuple[int | str, ...]) -> str:
    return "[" + ", ".join(str(d) for d in shape) + "]"
