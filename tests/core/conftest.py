"""Core test fixtures (helpers live in core_helpers.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from core_helpers import Workspace


@pytest.fixture
def ws(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Workspace:
    """A workspace whose state/phases/inventory env vars are set for in-process CLI calls."""
    w = Workspace(tmp_path)
    for k, v in w.env().items():
        monkeypatch.setenv(k, v)
    monkeypatch.delenv("ORCHESTRATOR_JSON", raising=False)
    return w
