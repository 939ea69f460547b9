"""``{name}`` placeholders in step commands and gate values (plans/0001 §4).

Only names from :data:`PLACEHOLDERS` exist; ``{{`` and ``}}`` are literal braces. Rendering
is plain string substitution per argv element: no format-spec, no attribute access, no eval.
"""

from __future__ import annotations

import re

#: The fixed set of names a step command may use (plans/0001-architecture-contracts.md §4).
PLACEHOLDERS: frozenset[str] = frozenset(
    {
        "python",
        "arch",
        "model_family",
        "host",
        "address",
        "bundle_dir",
        "bundle_sha",
        "remote_root",
        "service_python",
        "health_url",
        "generate_url",
        "restart_json",
        "health_timeout_s",
        "state_host_dir",
    }
)

_TOKEN = re.compile(r"\{\{|\}\}|\{([^{}]*)\}|[{}]")


def placeholders_in(text: str) -> list[str]:
    """Names used in ``text``; raises ValueError on a stray brace or an empty/invalid name."""
    names: list[str] = []
    for m in _TOKEN.finditer(text):
        tok = m.group(0)
        if tok in ("{{", "}}"):
            continue
        if tok in ("{", "}"):
            raise ValueError(f"unbalanced brace in {text!r} (write {{{{ or }}}} for a literal brace)")
        name = m.group(1)
        if not re.fullmatch(r"[a-z_][a-z0-9_]*", name or ""):
            raise ValueError(f"invalid placeholder {{{name}}} in {text!r}")
        names.append(name)
    return names


def unknown_placeholders(text: str) -> list[str]:
    return [n for n in placeholders_in(text) if n not in PLACEHOLDERS]


def render(text: str, values: dict[str, str | None]) -> str:
    """Substitute placeholders; a name whose value is None raises KeyError naming it."""

    def sub(m: re.Match[str]) -> str:
        tok = m.group(0)
        if tok == "{{":
            return "{"
        if tok == "}}":
            return "}"
        name = m.group(1)
        value = values.get(name)
        if value is None:
            raise KeyError(name)
        return value

    return _TOKEN.sub(sub, text)
