"""Transports run a step's argument list on a host: locally or over SSH.

The engine depends only on :class:`~orchestrator.transport.base.Transport`; the SSH
implementation (Fabric) is imported lazily so that ``orchestrator status`` never imports
fabric or paramiko.
"""

from orchestrator.transport.base import CommandResult, Transport

__all__ = ["CommandResult", "Transport"]
