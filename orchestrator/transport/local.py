"""Run argument lists on this machine: the transport of ``connection: local`` hosts.

Each command starts in its own process group (session) so a timeout or an interrupt kills the
whole tree (SIGTERM, then SIGKILL after ``kill_after_s``). stderr streams into ``log_path``
while the command runs, stdout into ``log_path`` with suffix ``.stdout``; both are also
returned in the :class:`CommandResult`. Never raises for a non-zero exit; a missing executable
is exit 127 with the reason on stderr.

A command run with a step's ``log_path`` (``<state>/runs/<run>/<host>/<job>.log``) is recorded
while it runs in ``<jobs_dir>/<job>.pid`` (its process group), the record the SSH transport keeps
on a host: ``jobs_dir`` defaults to ``<state>/jobs/<host>/`` (this machine writes nothing outside
the state dir), so :meth:`LocalTransport.running_job` can tell a resume that an earlier copy still
runs, and ``run`` refuses to start a second one.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from pathlib import Path

from orchestrator.atomic import atomic_write_text
from orchestrator.transport.base import CommandResult, JobStillRunning, RemoteJob, TransferResult, terminators
from orchestrator.transport.framing import job_name, parse_pid_line

_live: set[subprocess.Popen[bytes]] = set()
_live_lock = threading.Lock()


def _kill_group(proc: subprocess.Popen[bytes], kill_after_s: float) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            return
        try:
            proc.wait(timeout=kill_after_s)
            return
        except subprocess.TimeoutExpired:
            continue


def terminate_all(kill_after_s: float = 2.0) -> int:
    """Kill every command this process started and that is still running (on interrupt): local
    process groups, and through the registered terminators (the SSH transport's) the process
    groups on every host, each confirmed gone (or SIGKILLed) before this returns."""
    with _live_lock:
        procs = list(_live)
    for p in procs:
        _kill_group(p, kill_after_s)
    killed = len(procs)
    for fn in terminators():
        try:
            killed += fn(kill_after_s)
        except Exception:  # noqa: BLE001 - an interrupt must go on to record the state
            pass
    return killed


def _group_alive(pgid: int) -> bool:
    """True while a process of group ``pgid`` is running. ``killpg(pgid, 0)`` also succeeds
    while the group holds only zombies (killed, not yet reaped by their new parent), so the
    members are then read from ``/proc`` and zombies (state ``Z``) do not count."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    proc = Path("/proc")
    if not proc.is_dir():
        return True
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[-1].split()
        except OSError:
            continue  # exited meanwhile
        # after "pid (comm)": state ppid pgrp ...
        if len(fields) >= 3 and fields[2] == str(pgid) and fields[0] != "Z":
            return True
    return False


class LocalTransport:
    """:class:`~orchestrator.transport.base.Transport` for this machine (subprocess, no shell)."""

    def __init__(self, host_name: str = "local", *, kill_after_s: float = 5.0, jobs_dir: Path | None = None) -> None:
        self.host_name = host_name
        self.kill_after_s = kill_after_s
        self.jobs_dir = jobs_dir

    def drain_warnings(self) -> list[str]:
        """Nothing to warn about on this machine (see ``SSHTransport.drain_warnings``)."""
        return []

    def _adopt_jobs_dir(self, log_path: Path) -> None:
        """``<state>/jobs/<host>`` from a step log ``<state>/runs/<run>/<host>/<job>.log``."""
        if self.jobs_dir is None and log_path.parent.parent.parent.name == "runs":
            self.jobs_dir = log_path.parent.parent.parent.parent / "jobs" / log_path.parent.name

    def _pid_file(self, job: str) -> Path | None:
        return None if self.jobs_dir is None else self.jobs_dir / f"{job_name(job)}.pid"

    def running_job(self, job: str) -> RemoteJob | None:
        """See :meth:`orchestrator.transport.base.Transport.running_job` (a stale record is removed)."""
        pf = self._pid_file(job)
        if pf is None:
            return None
        try:
            rec = parse_pid_line(pf.read_text(encoding="utf-8", errors="replace"))
        except OSError:
            return None
        if rec is None or not _group_alive(rec.pgid):
            pf.unlink(missing_ok=True)
            return None
        return RemoteJob(
            host=self.host_name,
            job=job_name(job),
            pgid=rec.pgid,
            run_id=rec.run_id,
            started_at=rec.started_at,
            pid_file=str(pf),
        )

    def run(
        self,
        argv: list[str],
        *,
        timeout_s: float,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        log_path: Path | None = None,
    ) -> CommandResult:
        if not argv or not all(isinstance(a, str) for a in argv):
            raise ValueError("argv must be a non-empty list of strings")
        if log_path is not None:
            self._adopt_jobs_dir(log_path)
            earlier = self.running_job(log_path.stem)
            if earlier is not None:
                raise JobStillRunning(earlier)
        full_env = dict(os.environ)
        full_env.update(env or {})
        if log_path is not None:
            log_path.parent.mkdir(parents=True, exist_ok=True)
            err_path, out_path = log_path, log_path.with_suffix(".stdout")
            err_fh, out_fh = open(err_path, "w+b"), open(out_path, "w+b")
        else:
            err_fh, out_fh = tempfile.TemporaryFile(), tempfile.TemporaryFile()
        start = time.monotonic()
        timed_out = False
        try:
            try:
                proc = subprocess.Popen(
                    argv,
                    cwd=cwd,
                    env=full_env,
                    stdin=subprocess.DEVNULL,
                    stdout=out_fh,
                    stderr=err_fh,
                    start_new_session=True,
                )
            except (FileNotFoundError, PermissionError, NotADirectoryError) as exc:
                msg = f"cannot start {argv[0]!r}: {exc.strerror or exc}"
                err_fh.write((msg + "\n").encode())
                return CommandResult(
                    host=self.host_name,
                    argv=argv,
                    exit_code=127,
                    stderr=msg,
                    duration_s=time.monotonic() - start,
                    log_path=str(log_path) if log_path else None,
                )
            with _live_lock:
                _live.add(proc)
            pid_file = self._pid_file(log_path.stem) if log_path is not None else None
            if pid_file is not None and log_path is not None:
                try:
                    pid_file.parent.mkdir(parents=True, exist_ok=True)
                    started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
                    atomic_write_text(
                        pid_file, f"pgid={proc.pid} run={log_path.parent.parent.name} started={started} token=local\n"
                    )
                except OSError:
                    pid_file = None
            try:
                proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                timed_out = True
                _kill_group(proc, self.kill_after_s)
            finally:
                with _live_lock:
                    _live.discard(proc)
                if pid_file is not None:  # the step ended (or was killed): no copy of it runs any more
                    pid_file.unlink(missing_ok=True)
            duration = time.monotonic() - start
            out_fh.seek(0)
            err_fh.seek(0)
            stdout = out_fh.read().decode("utf-8", "replace")
            stderr = err_fh.read().decode("utf-8", "replace")
            code = None if timed_out else proc.returncode
            if log_path is not None:
                err_fh.write(f"\n[orchestrator] exit={code} timed_out={timed_out} duration_s={duration:.3f}\n".encode())
            return CommandResult(
                host=self.host_name,
                argv=argv,
                exit_code=code,
                stdout=stdout,
                stderr=stderr,
                duration_s=duration,
                timed_out=timed_out,
                log_path=str(log_path) if log_path else None,
            )
        finally:
            out_fh.close()
            err_fh.close()

    def put(self, local_path: Path, remote_path: str) -> TransferResult:
        dest = Path(remote_path)
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(local_path, dest)
        return TransferResult(host=self.host_name, remote_path=remote_path, bytes=dest.stat().st_size)

    def close(self) -> None:
        return None
