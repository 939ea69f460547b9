"""The transport interface shared by local execution and SSH (Fabric).

A transport runs one *argument list* (never a raw shell string) on one host, with a
timeout, and returns a :class:`CommandResult`. It never raises for a non-zero exit; it
raises :class:`orchestrator.errors.HostUnreachable` only when it cannot reach the host
at all (connect, host key, auth). A host lost mid-command is reported as a result with
``lost=True`` (Fabric's ``exited == -1``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from pydantic import BaseModel, Field

from orchestrator.errors import StepFailed

if TYPE_CHECKING:
    from orchestrator.transport.framing import JobRecord


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
    #: Things the caller should show the user once (a login-shell banner that was ignored, ...).
    warnings: list[str] = Field(default_factory=list)

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


class RemoteJob(BaseModel):
    """A copy of a step that is still running on a host (its process group and pid file)."""

    host: str
    job: str
    pgid: int
    run_id: str = ""
    started_at: str = ""
    pid_file: str = ""

    @classmethod
    def from_record(cls, rec: JobRecord, *, host: str, job: str, pid_file: str) -> RemoteJob:
        """The running copy a pid-file line (:class:`~orchestrator.transport.framing.JobRecord`) names."""
        return cls(host=host, job=job, pgid=rec.pgid, run_id=rec.run_id, started_at=rec.started_at, pid_file=pid_file)

    def describe(self) -> str:
        by = f" by run {self.run_id}" if self.run_id else ""
        since = f" since {self.started_at}" if self.started_at else ""
        return (
            f"{self.host}: an earlier copy of {self.job} is still running as pid {self.pgid} "
            f"(process group {self.pgid}{since}{by}; recorded in {self.pid_file})"
        )


class JobStillRunning(StepFailed):
    """``run`` refused to start a step because an earlier copy of it still runs on the host
    (its message is :meth:`RemoteJob.describe`: host, pid, run, pid file)."""

    code = "STILL_RUNNING"

    def __init__(self, job: RemoteJob) -> None:
        super().__init__(
            job.describe() + "; not starting a second copy (wait for it to end, or stop that process group)",
            host=job.host,
        )
        self.job = job


#: Callables that kill remote commands still in flight (registered by the SSH transport when
#: it is imported); :func:`orchestrator.transport.local.terminate_all` calls them all.
_terminators: list[Callable[[float], int]] = []
_terminators_lock = threading.Lock()


def register_terminator(fn: Callable[[float], int]) -> None:
    """Add ``fn(kill_after_s) -> how many commands it killed`` to what an interrupt calls."""
    with _terminators_lock:
        if fn not in _terminators:
            _terminators.append(fn)


def terminators() -> list[Callable[[float], int]]:
    with _terminators_lock:
        return list(_terminators)


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
        The command runs in its own process group; while it runs, the group is recorded under
        the job name ``log_path.stem`` (``<phase label>-<step id>``) so that an interrupt
        (:func:`orchestrator.transport.local.terminate_all`) kills it and a later run can find it
        with :meth:`running_job`; ``run`` itself raises :class:`JobStillRunning` instead of
        starting a step whose earlier copy still runs. ``CommandResult.warnings`` carries what
        the user should see once (an ignored login banner, skipped known_hosts lines).
        """
        ...

    def put(self, local_path: Path, remote_path: str) -> TransferResult:
        """Copy one file to the host (creating parent directories)."""
        ...

    def running_job(self, job: str) -> RemoteJob | None:
        """The copy of ``job`` (``<phase label>-<step id>``, the stem of the step's log file)
        still running on the host, or None. A stale record (its process group is gone) is
        removed. A resume calls this before it starts the step again and refuses, naming
        the pid and host, when it returns a job."""
        ...

    def close(self) -> None: ...
