"""Load YAML files safely and turn pydantic errors into one ``file:line: field: message`` line.

YAML is read with ``yaml.safe_load`` semantics (the C loader where libyaml is present), except
that a mapping with the same key twice is refused: plain ``safe_load`` silently keeps the last
value, so a second ``port:`` or ``steps:`` would replace the first without a word. Merge keys
(``<<: *anchor``) may still be overridden by explicit keys, as YAML intends.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from orchestrator.errors import SpecError

if TYPE_CHECKING:  # pydantic is only needed once a document fails validation
    from pydantic import ValidationError

_Base: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_MERGE_TAG = "tag:yaml.org,2002:merge"

#: A position in a loaded document: mapping keys and list indexes, as in a pydantic ``loc``.
Loc = tuple[Any, ...]


class UniqueKeyLoader(_Base):  # type: ignore[misc]  # (C)SafeLoader is untyped
    """``SafeLoader`` that raises a ``ConstructorError`` at the second occurrence of a mapping key."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        if isinstance(node, yaml.MappingNode):
            seen: dict[Any, int] = {}
            for key_node, _ in node.value:
                if key_node.tag == _MERGE_TAG:
                    continue
                key = self.construct_object(key_node, deep=True)
                try:
                    first = seen.get(key)
                except TypeError:  # unhashable key: SafeConstructor reports it itself
                    continue
                if first is not None:
                    raise yaml.constructor.ConstructorError(
                        "while constructing a mapping",
                        node.start_mark,
                        f"duplicate key {key!r} (first at line {first})",
                        key_node.start_mark,
                    )
                seen[key] = key_node.start_mark.line + 1
        result: dict[Any, Any] = super().construct_mapping(node, deep=deep)
        return result


class YamlDocument:
    """A loaded top-level mapping and the 1-based line of every key and list item in it.

    The lines are worked out from the node tree on first use (only an error message needs them)."""

    __slots__ = ("path", "data", "_node", "_lines")

    def __init__(self, path: Path, data: dict[str, Any], node: yaml.Node | None = None) -> None:
        self.path = path
        self.data = data
        self._node = node
        self._lines: dict[Loc, int] | None = None

    @property
    def lines(self) -> dict[Loc, int]:
        if self._lines is None:
            self._lines = {}
            if self._node is not None:
                _record_lines(self._node, self.data, (), self._lines)
        return self._lines

    def line_of(self, loc: Loc) -> int | None:
        """The line of ``loc`` or of its nearest ancestor that is in the document."""
        for n in range(len(loc), 0, -1):
            line = self.lines.get(tuple(loc[:n]))
            if line is not None:
                return line
        return None

    def where(self, loc: Loc) -> str:
        """``file:line`` for ``loc`` (``file`` alone when the line is unknown)."""
        line = self.line_of(loc)
        return f"{self.path}:{line}" if line is not None else str(self.path)


def _record_lines(node: yaml.Node, data: Any, loc: Loc, lines: dict[Loc, int]) -> None:
    if isinstance(node, yaml.MappingNode) and isinstance(data, dict):
        for key_node, value_node in node.value:
            if key_node.tag == _MERGE_TAG or not isinstance(key_node, yaml.ScalarNode):
                continue
            key = key_node.value
            if key not in data:  # a non-string key (e.g. `1:`): look it up as constructed
                key = next((k for k in data if str(k) == key), key)
            if key in data:
                lines[loc + (key,)] = key_node.start_mark.line + 1
                _record_lines(value_node, data[key], loc + (key,), lines)
    elif isinstance(node, yaml.SequenceNode) and isinstance(data, list):
        for i, (item_node, item) in enumerate(zip(node.value, data, strict=False)):
            lines[loc + (i,)] = item_node.start_mark.line + 1
            _record_lines(item_node, item, loc + (i,), lines)


def _parse(text: str) -> tuple[Any, yaml.Node | None]:
    loader = UniqueKeyLoader(text)
    try:
        node = loader.get_single_node()
        return (None, None) if node is None else (loader.construct_document(node), node)
    finally:
        loader.dispose()


def load_yaml_document(path: Path, *, what: str) -> YamlDocument:
    """Read a YAML file that must hold a mapping, with line numbers; any problem is a :class:`SpecError`
    whose message starts with ``file`` or ``file:line:column``."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise SpecError(f"{path}: {what} file not found", hint="check the path") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise SpecError(f"{path}: cannot read {what}: {exc}") from None
    if "\x00" in text:
        raise SpecError(f"{path}: NUL byte in {what} file")
    try:
        data, node = _parse(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f":{mark.line + 1}:{mark.column + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise SpecError(f"{path}{where}: malformed YAML: {problem}", hint=f"fix the {what} syntax") from None
    if not isinstance(data, dict):
        raise SpecError(f"{path}: {what} must be a mapping at the top level, got {type(data).__name__}")
    return YamlDocument(path=path, data=data, node=node)


def load_yaml_mapping(path: Path, *, what: str) -> dict[str, Any]:
    """:func:`load_yaml_document` without the line numbers."""
    return load_yaml_document(path, what=what).data


def loc_to_field(loc: Loc, data: Any, label: Callable[[Loc, Any], str] | None = None) -> str:
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


#: At most this many validation errors are spelled out in one message; the rest are counted.
MAX_ERRORS_SHOWN = 12


def join_problems(path: Path, problems: list[tuple[Loc, str, str]], doc: YamlDocument | None = None) -> str:
    """``(loc, field, message)`` items as one line: ``file:line: field: message; line N: field: message``."""
    parts: list[str] = []
    for loc, fld, msg in problems[:MAX_ERRORS_SHOWN]:
        line = doc.line_of(loc) if doc is not None else None
        if not parts:
            where = f"{path}:{line}" if line is not None else str(path)
        else:
            where = f"line {line}" if line is not None else ""
        parts.append(f"{where}: {fld}: {msg}" if where else f"{fld}: {msg}")
    more = f" (+{len(problems) - MAX_ERRORS_SHOWN} more)" if len(problems) > MAX_ERRORS_SHOWN else ""
    return "; ".join(parts) + more


def validation_error_line(path: Path, exc: ValidationError, data: Any, doc: YamlDocument | None = None) -> str:
    """One line naming every error: ``file:line: field: message; line N: field: message; ...``.

    With ``doc`` each error carries the line of its field (or of the nearest enclosing item),
    so an inventory with a bad port on three hosts names all three hosts, not the first."""
    problems: list[tuple[Loc, str, str]] = []
    for err in exc.errors(include_url=False):
        loc = tuple(p for p in err["loc"] if not (isinstance(p, str) and p.startswith("function-")))
        msg = err["msg"]
        if msg.startswith("Value error, "):
            msg = msg[len("Value error, ") :]
        problems.append((loc, loc_to_field(loc, data), msg))
    return join_problems(path, problems, doc)
