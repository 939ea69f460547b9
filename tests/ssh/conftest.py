"""Fixtures for the SSH tests: a real sshd lab on loopback, hosts, transports, a silent server.

Every ``ssh``-marked test is skipped, with the reason, where sshd is not installed.
Transports are closed before the lab stops (T10); the lab stops its sshd by PID.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
import lab as lab_mod  # noqa: E402
from labkit import SilentServer  # noqa: E402


def pytest_collection_modifyitems(config, items):
    reason = lab_mod.sshd_missing_reason()
    if reason is None:
        return
    skip = pytest.mark.skip(reason=f"ssh lab unavailable: {reason}")
    for item in items:
        if "ssh" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def shared_lab(tmp_path_factory) -> Iterator[lab_mod.Lab]:
    """Three sshd hosts shared by tests that do not kill or reconfigure hosts."""
    if lab_mod.sshd_missing_reason():
        pytest.skip(lab_mod.sshd_missing_reason())
    lab = lab_mod.start_lab(tmp_path_factory.mktemp("lab"), 3)
    yield lab
    lab.stop()


@pytest.fixture
def own_lab(tmp_path) -> Iterator[Callable[[int], lab_mod.Lab]]:
    """Factory for a private lab (for tests that kill hosts); stopped by PID at teardown."""
    labs: list[lab_mod.Lab] = []

    def start(n: int) -> lab_mod.Lab:
        lab = lab_mod.start_lab(tmp_path / f"lab{len(labs)}", n)
        labs.append(lab)
        return lab

    yield start
    for lab in labs:
        pids = lab.pids()
        lab.stop()
        survivors = [p for p in pids if lab_mod._is_live(p)]
        assert not survivors, f"sshd {survivors} survived teardown"


@pytest.fixture
def transports() -> Iterator[Callable]:
    """Factory for SSHTransport objects that are all closed at teardown (before the lab stops)."""
    from orchestrator.transport.ssh import SSHTransport

    made: list[SSHTransport] = []

    def make(host) -> SSHTransport:
        t = SSHTransport(host)
        made.append(t)
        return t

    yield make
    for t in made:
        t.close()


@pytest.fixture
def silent_server() -> Iterator[SilentServer]:
    s = SilentServer()
    yield s
    s.close()
