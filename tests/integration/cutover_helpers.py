"""Helpers for the cut-over tests (imported by name; never ``from conftest``).

:func:`make_bundle` lays out an unpacked bundle as the engine leaves it; :func:`run_cutover`
runs ``python -m cutover_agent`` as the engine does. The SGLang stand-in they run against is
tests/support/sglang_standin.py.
"""

from __future__ import annotations

from pathlib import Path

from tests.support.tools import run_tool


def make_bundle(root: Path, sha: str) -> Path:
    """An unpacked bundle dir as the engine leaves it: the plugin package and .sha256."""
    d = root / "bundles" / sha
    (d / "sglang_verify_plugin").mkdir(parents=True, exist_ok=True)
    (d / "sglang_verify_plugin" / "__init__.py").write_text("")
    (d / ".sha256").write_text(sha + "\n")
    return d


def run_cutover(*args: str, timeout: float = 120.0) -> tuple[int, dict]:
    """Run ``python -m cutover_agent ARGS --json`` as the engine would; (exit code, document)."""
    return run_tool("cutover_agent", *args, "--json", timeout=timeout)
