"""Fixtures of the fault suite: a private sshd lab per test (stopped by PID, survivors fail the
test), hosts pointing at it, and helpers that look at the HOST side (processes, files).

Every test here is marked ``ssh`` and skipped, with the reason, where sshd is not installed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support import sshd_lab
from tests.support.sshd_lab import Lab


def pytest_collection_modifyitems(config: Any, items: list[Any]) -> None:
    reason = sshd_lab.sshd_missing_reason()
    if reason is None:
        return
    skip = pytest.mark.skip(reason=f"ssh lab unavailable: {reason}")
    for item in items:
        if "ssh" in item.keywords and "faults" in str(item.fspath):
            item.add_marker(skip)


@pytest.fixture
def fault_lab(tmp_path: Path) -> Iterator[Callable[..., Lab]]:
    """Factory for a private lab; every sshd (and what it started) is stopped by PID at teardown."""
    with sshd_lab.lab_factory(tmp_path) as start:
        yield start


@pytest.fixture
def closing() -> Iterator[Callable[[Any], Any]]:
    """Register transports to close at teardown (before the lab stops, T10)."""
    made: list[Any] = []

    def add(t: Any) -> Any:
        made.append(t)
        return t

    yield add
    for t in made:
        t.close()
