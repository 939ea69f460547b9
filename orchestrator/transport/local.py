"""Run argument lists on this machine: the transport of ``connection: local`` hosts.

Each command runs inside the SSH transport's host-side wrapper
(:data:`orchestrator.transport.framing.WRAPPER_SH`, started here as ``/bin/sh -c`` without a
login shell, markers off): in its own session and process group, with the same pid-file record
and the same dead man's switch. The wrapper's stdin is a pipe whose write end only this process
holds and never writes; it reads end-of-file when this process closes it (a timeout, an
interrupt: :func:`terminate_all`) or when this process dies, SIGKILL included, and then kills the
command's whole group (SIGTERM, SIGKILL after ``kill_after_s``) and removes the record. So no
local step outlives the run that started it either. Whatever is still there ``_STOP_MARGIN_S``
after the grace is SIGKILLed from here. stderr streams into ``log_path`` while the command runs,
stdout into ``log_path`` with suffix ``.stdout``; both are also returned in the
:class:`CommandResult`. Never raises for a non-zero exit (a command killed by signal N exits
128+N, as over SSH); a missing executable or working directory is exit 127 with the reason on
stderr, and nothing is started.

A command run with a step's ``log_path`` (``<state>/runs/<run>/<host>/<job>.log``) is recorded
while it runs in ``<jobs_dir>/<job>.pid`` (its process group), the record the SSH transport keeps
on a host: ``jobs_dir`` defaults to ``<state>/jobs/<host>/`` (this machine writes nothing outside
the state dir), so :meth:`LocalTransport.running_job` can tell a resume that an earlier copy still
runs, and ``run`` refuses to start a second one (checked here, and again by the wrapper as it
starts).
"""

from __future__ import annotations

import math
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from orchestrator.transport.base import CommandResult, JobStillRunning, RemoteJob, TransferResult, terminators
from orchestrator.transport.framing import job_name, new_token, parse_pid_line, refused_record, wrapper_argv

#: Seconds past the switch's grace that :func:`_stop` waits for the wrapper to end before it
#: SIGKILLs what is left itself.
_STOP_MARGIN_S = 2.0

#: The wrappers running now, each with the pid file of its command (None: not recorded).
_live: dict[subprocess.Popen[bytes], Path | None] = {}
_live_lock = threading.Lock()


def _proc_stats() -> Iterator[tuple[int, str, int, int]]:
    """``(pid, state, ppid, pgrp)`` of every process in ``/proc`` (none where there is no /proc)."""
    proc = Path("/proc")
    if not proc.is_dir():
        return
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[-1].split()
        except OSError:
            continue  # exited meanwhile
        if len(fields) >= 3:  # after "pid (comm)": state ppid pgrp ...
            yield int(entry.name), fields[0], int(fields[1]), int(fields[2])


def _close_switch(proc: subprocess.Popen[bytes]) -> None:
    """Close this process's end of the wrapper's stdin pipe (also from a second thread at once:
    :func:`terminate_all` while ``run`` ends)."""
    try:
        if proc.stdin is not None:
            proc.stdin.close()
    except (OSError, ValueError):
        pass


def _stop(proc: subprocess.Popen[bytes], kill_after_s: float, pid_file: Path | None) -> None:
    """Stop a command started under the wrapper; returns once the wrapper has ended.

    Closing the wrapper's stdin fires its switch: SIGTERM to the command's group, SIGKILL after
    the grace, the pid file removed, then the wrapper exits. If it has not ended ``kill_after_s``
    + :data:`_STOP_MARGIN_S` later, the command's group (from the pid file, and any group the
    wrapper started) and the wrapper's own group are SIGKILLed here."""
    _close_switch(proc)
    try:
        proc.wait(timeout=kill_after_s + _STOP_MARGIN_S)
        return
    except subprocess.TimeoutExpired:
        pass
    groups = {pgrp for _, _, ppid, pgrp in _proc_stats() if ppid == proc.pid and pgrp != proc.pid}
    rec = None
    if pid_file is not None:
        try:
            rec = parse_pid_line(pid_file.read_text(encoding="utf-8", errors="replace"))
        except OSError:
            rec = None
    if rec is not None:
        groups.add(rec.pgid)
    for pg in sorted(groups) + [proc.pid]:
        try:
            os.killpg(pg, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        pass


def terminate_all(kill_after_s: float = 2.0) -> int:
    """Kill every command this process started and that is still running (on interrupt): local
    process groups, and through the registered terminators (the SSH transport's) the process
    groups on every host, each confirmed gone (or SIGKILLed) before this returns."""
    with _live_lock:
        procs = list(_live.items())
    stoppers = [threading.Thread(target=_stop, args=(p, kill_after_s, pf), daemon=True) for p, pf in procs]
    for th in stoppers:  # all at once: each may take up to its grace
        th.start()
    for th in stoppers:
        th.join()
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
    if not Path("/proc").is_dir():
        return True
    return any(pgrp == pgid and state != "Z" for _, state, _, pgrp in _proc_stats())


def _cannot_start(program: str, cwd: str | None, env: dict[str, str]) -> str | None:
    """Why ``program`` cannot be started in ``cwd`` with ``env``'s PATH (the reason exec would
    give), or None. Checked before the wrapper starts, so a typo is exit 127 with this reason."""
    if cwd is not None and not os.path.isdir(cwd):
        return "Not a directory" if os.path.exists(cwd) else "No such file or directory"
    if os.path.dirname(program):
        path = os.path.join(cwd or "", program)
        if not os.path.exists(path):
            return "No such file or directory"
        return None if os.path.isfile(path) and os.access(path, os.X_OK) else "Permission denied"
    found = shutil.which(program, path=os.pathsep.join(os.get_exec_path(env)))
    return None if found else "No such file or directory"


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
        return RemoteJob.from_record(rec, host=self.host_name, job=job_name(job), pid_file=str(pf))

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
            why = _cannot_start(argv[0], cwd, full_env)
            if why is not None:
                msg = f"cannot start {argv[0]!r}: {why}"
                err_fh.write((msg + "\n").encode())
                return CommandResult(
                    host=self.host_name,
                    argv=argv,
                    exit_code=127,
                    stderr=msg,
                    duration_s=time.monotonic() - start,
                    log_path=str(log_path) if log_path else None,
                )
            token = new_token()
            pid_file = self._pid_file(log_path.stem) if log_path is not None else None
            job = job_name(log_path.stem) if log_path is not None else f"cmd-{token[5:17]}"
            wrapped = wrapper_argv(
                argv,
                jobs_dir=str(pid_file.parent) if pid_file is not None else "",
                job=job,
                token=token,
                run_id=log_path.parent.parent.name if log_path is not None else "",
                cwd=cwd,
                grace_s=max(1, math.ceil(self.kill_after_s)),
                create_jobs_dir=pid_file is not None,
                frame=False,
                shell="/bin/sh",
            )
            # the wrapper's stdin: a pipe nobody writes to; its end-of-file is the switch
            proc = subprocess.Popen(
                wrapped, env=full_env, stdin=subprocess.PIPE, stdout=out_fh, stderr=err_fh, start_new_session=True
            )
            with _live_lock:
                _live[proc] = pid_file
            try:
                proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                timed_out = True
                _stop(proc, self.kill_after_s, pid_file)
            finally:
                with _live_lock:
                    _live.pop(proc, None)
                # the wrapper has ended; or this run is left by an exception (an interrupt in
                # the calling thread): the switch then kills what still runs
                _close_switch(proc)
            duration = time.monotonic() - start
            out_fh.seek(0)
            err_fh.seek(0)
            stdout = out_fh.read().decode("utf-8", "replace")
            stderr = err_fh.read().decode("utf-8", "replace")
            rec = refused_record(stdout, token)
            if rec is not None and pid_file is not None:  # a copy started between the check and here
                raise JobStillRunning(RemoteJob.from_record(rec, host=self.host_name, job=job, pid_file=str(pid_file)))
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
