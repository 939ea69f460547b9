"""Pick the transport for a host: local subprocess, or SSH (Fabric) imported lazily.

``orchestrator.transport.ssh.SSHTransport(host)`` is only imported when an ssh host actually
runs a command, so ``status``, ``plan`` and ``--dry-run`` never import fabric or paramiko.
Tests inject their own factory (any callable ``Host -> Transport``) into the engine.
"""

from __future__ import annotations

from collections.abc import Callable

from orchestrator.errors import HostUnreachable
from orchestrator.inventory import Host
from orchestrator.transport.base import Transport
from orchestrator.transport.local import LocalTransport

TransportFactory = Callable[[Host], Transport]
#: Where an ssh host keeps the pid files of the steps running on it: ``<remote_root>/jobs/``.
JOBS_SUBDIR = "jobs"


def make_transport(host: Host) -> Transport:
    """A new transport for ``host``; raises HostUnreachable if the ssh transport is unavailable."""
    if host.is_local:
        return LocalTransport(host.name)  # job records under <state>/jobs/<host>/ (from the step's log path)
    try:
        from orchestrator.transport.ssh import SSHTransport  # noqa: PLC0415 - lazy on purpose
    except ImportError as exc:
        raise HostUnreachable(
            f"host {host.name}: the SSH transport is not available ({exc})",
            host=host.name,
            hint="orchestrator/transport/ssh.py (issue 4) provides it; --dry-run works without it",
        ) from None
    return SSHTransport(host)
