"""Persisted todo state (``<state_dir>/state.json``) and the run lock.

**Layout** of the state dir: ``state.json`` (this model, pretty JSON), ``lock`` (the filelock),
``lock.json`` (who holds it: pid, hostname, start time, command), ``audit.jsonl`` (approvals),
``runs/<run_id>/<host>/<phase>-<step>.log`` (captured output; ``@local`` is this machine).

**Lifecycle**: ``StateStore.lock()`` is held for a whole run; ``load()`` may be called without
it (``status``); ``save()`` writes atomically (temp file, fsync, rename, fsync dir) and is
called after every step transition, so a run killed at any point leaves a file that loads.
A step found ``in_progress`` while nobody holds the lock was left by a dead run: it is shown
(and, under the lock, recorded) as ``interrupted`` and runs again on resume. The transitions of
the records are functions in :mod:`orchestrator.records` (docs/state-machine.md).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import sys
from enum import Enum
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, ValidationError

from orchestrator.atomic import atomic_write_text
from orchestrator.errors import StateConflict

SCHEMA_VERSION = 1
#: Host name under which ``runs_on: local`` steps are recorded, in state and in paths
#: (``runs/<run>/@local/``, ``hosts/@local/``); not a valid inventory host name.
CONTROLLER = "@local"
#: Seconds a run waits for the lock before reporting who holds it (exit 6).
ACQUIRE_WAIT_S = 1.0


def utcnow() -> str:
    return dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class Status(str, Enum):
    pending = "pending"
    in_progress = "in_progress"
    completed = "completed"
    failed = "failed"
    blocked = "blocked"
    awaiting_approval = "awaiting_approval"
    skipped = "skipped"
    interrupted = "interrupted"


class GateOutcome(BaseModel):
    metric: str
    op: str
    expected: Any
    actual: Any = None
    passed: bool
    reason: str  # the spec's reason (why this threshold)
    detail: str = ""  # why it failed (missing metric, type mismatch)


class HostStepResult(BaseModel):
    """One step on one host. ``metrics`` maps dotted path -> value read from the step's JSON."""

    status: Status = Status.pending
    exit_code: int | None = None
    duration_s: float | None = None
    started_at: str | None = None
    finished_at: str | None = None
    metrics: dict[str, Any] = {}
    gates: list[GateOutcome] = []
    log_path: str | None = None
    reason: str | None = None
    command: str | None = None


class StepRecord(BaseModel):
    """A todo item: one step of one phase with its per-host results."""

    id: str
    content: str
    priority: str = "medium"
    status: Status = Status.pending
    rollback: bool = False
    reason: str | None = None
    started_at: str | None = None
    finished_at: str | None = None
    hosts: dict[str, HostStepResult] = {}


class BundleEvidence(BaseModel):
    """What the engine did with the bundle on one host in one phase (ssh hosts; local hosts in
    phases that change a service). ``found`` is the first host-side check's verdict (``ok``,
    ``absent``, ``tarball-mismatch <sha>``, ``unpacked-missing``, ``unpacked-mismatch``);
    ``repaired`` means a copy was there but failed that check and was re-shipped/re-unpacked
    (the damaged tree is kept on the host as ``<sha>.damaged.<pid>``). ``checks`` counts the
    host-side hash checks in this phase (one before every step); ``last_check`` is the latest
    verdict and ``verified`` whether it said ``ok``."""

    sha256: str
    remote_dir: str
    uploaded: bool = False
    unpacked: bool = False
    repaired: bool = False
    found: str = ""
    verified: bool = False
    checks: int = 0
    last_check: str = ""
    checked_at: str | None = None
    ship_duration_s: float | None = None


class HostPhase(BaseModel):
    status: Status = Status.pending
    reason: str | None = None
    bundle_sha: str | None = None
    spec_sha: str | None = None
    finished_at: str | None = None
    bundle: BundleEvidence | None = None


class PhaseRecord(BaseModel):
    id: int
    name: str
    title: str = ""
    status: Status = Status.pending
    reason: str | None = None
    run_id: str | None = None
    started_at: str | None = None
    finished_at: str | None = None
    bundle_sha: str | None = None
    spec_sha: str | None = None
    hosts: dict[str, HostPhase] = {}
    steps: list[StepRecord] = []

    def step(self, step_id: str) -> StepRecord | None:
        for s in self.steps:
            if s.id == step_id:
                return s
        return None


class RunInfo(BaseModel):
    run_id: str
    command: str
    pid: int
    hostname: str
    user: str
    started_at: str
    finished_at: str | None = None
    exit_code: int | None = None
    phases: list[int] = []
    hosts: list[str] = []
    plan_digest: str | None = None


class RunState(BaseModel):
    schema_version: int = SCHEMA_VERSION
    created_at: str = Field(default_factory=utcnow)
    updated_at: str = Field(default_factory=utcnow)
    inventory: str | None = None
    bundle_sha: str | None = None
    phases: dict[str, PhaseRecord] = {}
    last_run: RunInfo | None = None

    def phase(self, phase_id: int) -> PhaseRecord | None:
        return self.phases.get(str(phase_id))

    def in_progress_steps(self) -> list[tuple[PhaseRecord, StepRecord, str]]:
        out: list[tuple[PhaseRecord, StepRecord, str]] = []
        for p in self.phases.values():
            for s in p.steps:
                for h, r in s.hosts.items():
                    if r.status == Status.in_progress:
                        out.append((p, s, h))
        return out


class LockHolder(BaseModel):
    pid: int
    hostname: str
    user: str
    started_at: str
    command: str

    def describe(self) -> str:
        return f"pid {self.pid} on {self.hostname} (user {self.user}, since {self.started_at}): {self.command}"


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def current_user() -> str:
    try:
        import getpass

        return getpass.getuser()
    except Exception:  # no passwd entry in some containers
        return str(os.getuid())


class RunLock:
    """The one lock of a run (filelock on ``<state_dir>/lock``) plus ``lock.json`` holder info.

    ``stale`` is set when ``lock.json`` named a dead process: the OS had already released that
    run's lock, so it is taken over and the caller reports a warning.
    """

    def __init__(self, state_dir: Path, command: str) -> None:
        from filelock import FileLock  # small; imported here so `status` stays lean

        self.state_dir = state_dir
        self.command = command
        self.info_path = state_dir / "lock.json"
        self._lock = FileLock(str(state_dir / "lock"), timeout=0, thread_local=False)
        self.stale: LockHolder | None = None

    def read_holder(self) -> LockHolder | None:
        try:
            return LockHolder.model_validate_json(self.info_path.read_text())
        except (OSError, ValidationError, ValueError):
            return None

    def acquire(self) -> RunLock:
        import socket

        from filelock import Timeout

        self.state_dir.mkdir(parents=True, exist_ok=True)
        try:
            # a short wait: `status` probes the lock for an instant and must not make a run fail
            self._lock.acquire(timeout=ACQUIRE_WAIT_S)
        except Timeout:
            holder = self.read_holder()
            who = holder.describe() if holder else "another process (no holder info)"
            raise StateConflict(
                f"state dir {self.state_dir} is locked by {who}",
                hint="wait for that run to finish, or use another --state-dir",
            ) from None
        previous = self.read_holder()
        if previous is not None and not (
            previous.hostname == socket.gethostname() and pid_alive(previous.pid) and previous.pid != os.getpid()
        ):
            self.stale = previous
        me = LockHolder(
            pid=os.getpid(),
            hostname=socket.gethostname(),
            user=current_user(),
            started_at=utcnow(),
            command=self.command,
        )
        atomic_write_text(self.info_path, me.model_dump_json(indent=2))
        return self

    def release(self) -> None:
        try:
            self.info_path.unlink()
        except FileNotFoundError:
            pass
        self._lock.release()

    def __enter__(self) -> RunLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


class StateStore:
    """Reads and writes ``state.json`` in ``state_dir``."""

    def __init__(self, state_dir: Path) -> None:
        self.dir = state_dir
        self.path = state_dir / "state.json"
        self.audit_path = state_dir / "audit.jsonl"

    def load(self) -> RunState:
        """The saved state, or a fresh one. A newer schema_version, or a file that cannot be read,
        decoded or validated -> StateConflict (exit 6) naming the file, which is left untouched."""
        try:
            text = self.path.read_bytes().decode("utf-8")
        except FileNotFoundError:
            return RunState()
        except UnicodeDecodeError as exc:
            raise StateConflict(
                f"{self.path}: not valid UTF-8 (byte {exc.start}); the file was left untouched",
                hint="restore it or move it away",
            ) from None
        except OSError as exc:
            raise StateConflict(
                f"{self.path}: cannot read the state file ({exc.strerror or exc}); the file was left untouched",
                hint="fix its permissions, or restore it or move it away",
            ) from None
        try:
            raw = json.loads(text)
        except ValueError as exc:
            raise StateConflict(f"{self.path}: not valid JSON ({exc})", hint="restore it or move it away") from None
        version = raw.get("schema_version") if isinstance(raw, dict) else None
        if not isinstance(version, int):
            raise StateConflict(f"{self.path}:schema_version: missing or not an integer")
        if version > SCHEMA_VERSION:
            raise StateConflict(
                f"{self.path}:schema_version: {version} is newer than this orchestrator ({SCHEMA_VERSION})",
                hint="upgrade the orchestrator; the file was left untouched",
            )
        try:
            return RunState.model_validate(raw)
        except ValidationError as exc:
            first = exc.errors(include_url=False)[0]
            field = ".".join(str(p) for p in first["loc"])
            raise StateConflict(f"{self.path}:{field}: {first['msg']}") from None

    def load_for_display(self) -> RunState:
        """Like :meth:`load`, but in_progress items of a dead run show as interrupted (not saved)."""
        state = self.load()
        if state.in_progress_steps() and not self.lock_held():
            from orchestrator.records import mark_interrupted  # records imports this module

            who = f"run {state.last_run.run_id} (pid {state.last_run.pid})" if state.last_run else "an earlier run"
            mark_interrupted(state, f"interrupted: {who} ended while this step was running")
        return state

    def lock_held(self) -> bool:
        """True if some live process holds the run lock: a non-blocking ``flock`` probe of
        ``<state_dir>/lock`` (the lock filelock takes on Unix), released at once. Imports no
        filelock, so ``status`` stays lean."""
        import fcntl

        try:
            fd = os.open(self.dir / "lock", os.O_RDONLY)
        except OSError:  # no lock file (never run) or unreadable: nobody can be holding it here
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        except OSError:
            return False
        else:
            fcntl.flock(fd, fcntl.LOCK_UN)
            return False
        finally:
            os.close(fd)

    def lock_holder(self) -> LockHolder | None:
        """The holder info written next to the lock (possibly left by a run that died)."""
        try:
            return LockHolder.model_validate_json((self.dir / "lock.json").read_text())
        except (OSError, ValidationError, ValueError):
            return None

    def save(self, state: RunState) -> None:
        state.updated_at = utcnow()
        atomic_write_text(self.path, state.model_dump_json(indent=2) + "\n")


def command_line() -> str:
    return " ".join([Path(sys.argv[0]).name] + sys.argv[1:])[:500]
