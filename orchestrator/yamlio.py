"""Load YAML files safely and turn pydantic errors into one ``file:field: message`` line."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from orchestrator.errors import SpecError


def load_yaml_mapping(path: Path, *, what: str) -> dict[str, Any]:
    """``yaml.safe_load`` a file that must hold a mapping; any problem is a :class:`SpecError`."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise SpecError(f"{path}: {what} file not found", hint="check the path") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise SpecError(f"{path}: cannot read {what}: {exc}") from None
    if "\x00" in text:
        raise SpecError(f"{path}: NUL byte in {what} file")
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f":{mark.line + 1}:{mark.column + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise SpecError(f"{path}{where}: malformed YAML: {problem}", hint=f"fix the {what} syntax") from None
    if not isinstance(data, dict):
        raise SpecError(f"{path}: {what} must be a mapping at the top level, got {type(data).__name__}")
    return data


def loc_to_field(loc: tuple[Any, ...], data: Any, label: Callable[[tuple[Any, ...], Any], str] | None = None) -> str:
    """Render a pydantic ``loc`` as ``hosts[1](gpu-02).port``; list items named by their ``name``/``id``."""
    out = ""
    node = data
    for part in loc:
        if isinstance(part, int):
            name = None
            if isinstance(node, list) and 0 <= part < len(node) and isinstance(node[part], dict):
                name = node[part].get("name", node[part].get("id"))
            out += f"[{part}]" + (f"({name})" if name is not None else "")
            node = node[part] if isinstance(node, list) and 0 <= part < len(node) else None
        else:
            out += ("." if out else "") + str(part)
            node = node.get(part) if isinstance(node, dict) else None
    return out or "<top level>"


def validation_error_line(path: Path, exc: ValidationError, data: Any) -> str:
    """One line: ``file:field: message`` for the first error, and how many more there are."""
    errors = exc.errors(include_url=False)
    first = errors[0]
    loc = tuple(p for p in first["loc"] if not (isinstance(p, str) and p.startswith("function-")))
    msg = first["msg"]
    if msg.startswith("Value error, "):
        msg = msg[len("Value error, ") :]
    more = f" (+{len(errors) - 1} more)" if len(errors) > 1 else ""
    return f"{path}:{loc_to_field(loc, data)}: {msg}{more}"
