"""Exit codes and the typed error tree the CLI turns into one-line messages.

The engine raises these; only ``orchestrator.cli`` converts them into process exit codes.
Every error names where it happened (file:field, host, phase) and may carry a hint: the
exact next command a user should run.
"""

from __future__ import annotations

from enum import IntEnum
from typing import Any


class ExitCode(IntEnum):
    """Process exit codes (docs/contract.md, the stable contract)."""

    OK = 0
    FAILED = 1  # a step or gate failed on at least one host
    USAGE = 2  # bad flags or arguments (Typer/Click's own code)
    INVALID_SPEC = 3  # invalid phase spec or inventory
    UNREACHABLE = 4  # host unreachable (connect, host key, auth)
    NOT_APPROVED = 5  # approval missing or refused
    STATE_CONFLICT = 6  # state locked, newer schema, or stale plan/digest
    INTERRUPTED = 130  # Ctrl-C / SIGTERM


class OrchestratorError(Exception):
    """Base of every expected error. ``str(err)`` is the one-line message."""

    exit_code: ExitCode = ExitCode.FAILED
    code: str = "FAILED"

    def __init__(
        self,
        message: str,
        *,
        hint: str | None = None,
        host: str | None = None,
        phase: str | None = None,
        log_path: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint
        self.host = host
        self.phase = phase
        self.log_path = log_path
        #: the plan the error refers to (shown in the ``--json`` envelope), when one was built
        self.plan: Any = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "code": self.code,
            "exit_code": int(self.exit_code),
            "message": self.message,
            "hint": self.hint,
            "host": self.host,
            "phase": self.phase,
            "log": self.log_path,
        }


class UsageError(OrchestratorError):
    exit_code = ExitCode.USAGE
    code = "USAGE"


class SpecError(OrchestratorError):
    """A phase spec or inventory file is invalid; the message starts with ``file:field``."""

    exit_code = ExitCode.INVALID_SPEC
    code = "INVALID_SPEC"


class HostUnreachable(OrchestratorError):
    """Connect, host-key or auth failure (or the host was lost) before/while running."""

    exit_code = ExitCode.UNREACHABLE
    code = "UNREACHABLE"


class ApprovalError(OrchestratorError):
    """Approval refused, missing (no TTY and no ``--approve``), or a wrong digest."""

    exit_code = ExitCode.NOT_APPROVED
    code = "NOT_APPROVED"


class StateConflict(OrchestratorError):
    """State lock held by another run, a newer schema_version, or a stale plan digest."""

    exit_code = ExitCode.STATE_CONFLICT
    code = "STATE_CONFLICT"


class StepFailed(OrchestratorError):
    exit_code = ExitCode.FAILED
    code = "STEP_FAILED"


class Interrupted(OrchestratorError):
    exit_code = ExitCode.INTERRUPTED
    code = "INTERRUPTED"


class InternalError(OrchestratorError):
    """A bug: anything unexpected, reported as one line (the traceback only with ``--debug``)."""

    exit_code = ExitCode.FAILED
    code = "INTERNAL"
