"""The transport interface shared by local execution and SSH (Fabric).

A transport runs one *argument list* (never a raw shell string) on one host, with a
timeout, and returns a :class:`CommandResult`. It never raises for a non-zero exit; it
raises :class:`orchestrator.errors.HostUnreachable` only when it cannot reach the host
at all (connect, host key, auth). A host lost mid-command is reported as a result with
``lost=True`` (Fabric's ``exited == -1``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol, runtime_checkable

from pydantic import BaseModel, Field


class CommandResult(BaseModel):
    """What one command did on one host.

    ``exit_code`` is None when no exit status came back (timeout or lost host).
    ``stdout``/``stderr`` hold the full captured text (also written to ``log_path``).
    """

    host: str
    argv: list[str]
    exit_code: int | None
    stdout: str = ""
    stderr: str = ""
    duration_s: float = 0.0
    timed_out: bool = False
    lost: bool = False
    log_path: str | None = None

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out and not self.lost

    def stderr_tail(self, lines: int = 20) -> str:
        return "\n".join(self.stderr.splitlines()[-lines:])


class TransferResult(BaseModel):
    host: str
    remote_path: str
    bytes: int = 0
    skipped: bool = False  # already present and its hash verified
    detail: str = Field(default="")


@runtime_checkable
class Transport(Protocol):
    """Runs argument lists on one host.

    **Lifecycle**: created per host by the engine, ``run`` called any number of times,
    ``close`` once at the end of a run (also on failure).
    """

    host_name: str

    def run(
        self,
        argv: list[str],
        *,
        timeout_s: float,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        log_path: Path | None = None,
    ) -> CommandResult:
        """Run ``argv`` in ``cwd`` with extra ``env``; kill it after ``timeout_s`` seconds.

        Remote implementations quote every element with :func:`shlex.quote` and wrap the
        command in ``timeout`` on the host so a client-side timeout never leaves it running.
        """
        ...

    def put(self, local_path: Path, remote_path: str) -> TransferResult:
        """Copy one file to the host (creating parent directories)."""
        ...

    def close(self) -> None: ...
