"""Fixtures for the SSH tests: a real sshd lab on loopback, hosts, transports, a silent server.

Every ``ssh``-marked test is skipped, with the reason, where sshd is not installed.
Transports are closed before the lab stops (T10); the lab stops its sshd by PID.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from labkit import SilentServer

from tests.support import sshd_lab
from tests.support.sshd_lab import Lab


def pytest_collection_modifyitems(config, items):
    reason = sshd_lab.sshd_missing_reason()
    if reason is None:
        return
    skip = pytest.mark.skip(reason=f"ssh lab unavailable: {reason}")
    for item in items:
        if "ssh" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def shared_lab(tmp_path_factory) -> Iterator[Lab]:
    """Three sshd hosts shared by tests that do not kill or reconfigure hosts."""
    with sshd_lab.running_lab(tmp_path_factory.mktemp("lab"), 3) as lab:
        yield lab


@pytest.fixture
def own_lab(tmp_path) -> Iterator[Callable[[int], Lab]]:
    """Factory for a private lab (for tests that kill hosts); stopped by PID at teardown."""
    with sshd_lab.lab_factory(tmp_path) as start:
        yield start


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
