"""SSH transport: one Fabric ``Connection`` per inventory host, strict host keys, bounded time.

Fabric's defaults are unsafe or hang-prone for a deploy tool (docs/ssh-traps.md), so every
Connection here is built the same way:

- ``lazy=True`` (no ``/etc/fabric.*``) and an empty Fabric ssh_config: the user's ssh_config
  (``~/.ssh/config`` or ``$ORCHESTRATOR_SSH_CONFIG``) is resolved here instead, so that ProxyJump
  hops are built by us with strict host keys (T18, T21); ``in_stream=False`` on every run (T1);
- known_hosts read by :mod:`orchestrator.transport.known_hosts` (``@revoked`` refused naming
  file:line, ``@cert-authority`` and malformed lines warned, T14-T16) and a policy that rejects
  every unknown key (T2): nothing is ever added;
- ``connect_timeout`` in whole seconds >= 1 (T3) plus banner, auth and channel timeouts, a
  client-side ``timeout=`` on every run (T4) and ``timeout`` on the host around the command
  (T8), so neither a hung host nor an abandoned command outlives its bound;
- commands are rendered by :func:`remote_argv` (shlex-quoted; Fabric's ``env=`` is never used,
  T5) and run inside :mod:`orchestrator.transport.framing`'s wrapper: output between
  per-command markers (a login banner is ignored, T11), the command in its own process group
  recorded in ``<remote_root>/jobs/<job>.pid`` (killed on interrupt, T12) and killed on the host
  when the channel goes away (T13); ``.exited`` checked (-1 = lost, T7);
- agent keys are offered after ``ssh_key`` and ssh_config's IdentityFiles (T19).

Connect, host-key and auth failures raise :class:`HostUnreachable` naming the host and the
cause. Keys and ``connect_kwargs`` are never logged.
"""

from __future__ import annotations

import errno
import functools
import getpass
import logging
import math
import os
import posixpath
import shlex
import socket
import threading
import time
import uuid
from pathlib import Path
from typing import Any, Protocol

from orchestrator.atomic import atomic_write_text
from orchestrator.errors import HostUnreachable, StepFailed
from orchestrator.transport import known_hosts as known_hosts_mod
from orchestrator.transport.base import (
    CommandResult,
    JobStillRunning,
    RemoteJob,
    TransferResult,
    register_terminator,
)
from orchestrator.transport.framing import (
    FRAME_ONLY_SH,
    KILL_SH,
    PROBE_SH,
    job_name,
    new_token,
    parse_pid_line,
    refused_record,
    unframe,
    wrap,
)
from orchestrator.transport.known_hosts import KnownHosts
from orchestrator.transport.remote_command import remote_argv, render_remote_command

log = logging.getLogger(__name__)

#: The client waits this much longer than the host-side ``timeout`` before giving up, so
#: that a command killed on the host still reports its exit status (124/137).
CLIENT_GRACE_S = 3
KEEPALIVE_S = 15
DEFAULT_CONNECT_TIMEOUT_S = 10
#: Seconds between SIGTERM and SIGKILL for a command's process group on the host.
KILL_AFTER_S = 10
#: SFTP idle bound: an upload that moves no data for this long fails (put() has no timeout).
TRANSFER_IDLE_TIMEOUT_S = 60


class SSHHost(Protocol):
    """The inventory host fields this transport reads (plans/0001 section 6)."""

    name: str
    address: str
    port: int
    user: str | None
    ssh_key: Any
    known_hosts: Any
    connect_timeout_s: Any
    command_timeout_s: Any


def _field(host: Any, name: str, default: Any = None) -> Any:
    value = getattr(host, name, default)
    return default if value is None else value


def whole_seconds(value: float | int | None, default: int) -> int:
    """``connect_timeout`` for Fabric: whole seconds >= 1 (Fabric calls ``int()``, T3)."""
    if value is None:
        return default
    return max(1, math.ceil(float(value)))


class SSHTransport:
    """Runs argument lists on one host over one SSH connection (opened on first use).

    Commands may be issued from several threads (each gets its own SSH channel); opening
    and dropping the connection is serialised.

    The user's ssh_config (``~/.ssh/config``, or the file named by ``ORCHESTRATOR_SSH_CONFIG``;
    ``none`` disables it) is read for the host's address the way ssh(1) reads it: ``HostName``,
    ``Port`` (when the inventory leaves the port at 22), ``User`` (when the inventory sets none),
    ``IdentityFile`` (tried after ``ssh_key``) and ``ProxyJump`` (when the inventory sets no
    ``proxy_jump``). Agent keys are offered after the files, so an encrypted ``ssh_key`` works
    when it is loaded in the agent.
    """

    def __init__(self, host: SSHHost, *, keepalive_s: int = KEEPALIVE_S, _hop: bool = False) -> None:
        self.host = host
        self.host_name: str = host.name
        self.ssh_config_path = _ssh_config_path()
        lk = _ssh_config_lookup(self.ssh_config_path, host.address)
        self.address: str = str(lk.get("hostname") or host.address)
        port = _field(host, "port", None)
        if port in (None, 22) and lk.get("port"):
            port = int(lk["port"])
        self.port: int = int(port or 22)
        self.user: str = _field(host, "user", None) or lk.get("user") or getpass.getuser()  # as ssh(1) does
        key = _field(host, "ssh_key", None)
        self.ssh_key: str | None = os.path.expanduser(str(key)) if key else None
        self.identity_files: list[str] = [
            os.path.expanduser(str(f)) for f in lk.get("identityfile", []) if os.path.isfile(os.path.expanduser(str(f)))
        ]
        kh = _field(host, "known_hosts", None)
        self.known_hosts: str | None = os.path.expanduser(str(kh)) if kh else None
        jump = _field(host, "proxy_jump", None) or lk.get("proxyjump")
        self.proxy_jump: str | None = None if not jump or str(jump).lower() == "none" else str(jump)
        self.connect_timeout_s = whole_seconds(_field(host, "connect_timeout_s"), DEFAULT_CONNECT_TIMEOUT_S)
        self.transfer_timeout_s = TRANSFER_IDLE_TIMEOUT_S
        self.keepalive_s = keepalive_s
        self._conn: Any = None
        self._gateways: list[Any] = []
        self._mu = threading.RLock()
        self._banner_reported = False
        self._known: KnownHosts | None = None
        self._pending_warnings: list[str] = []
        self._undrained: list[str] = []
        self._hop = _hop

    # ------------------------------------------------------------------ connection

    @property
    def target(self) -> str:
        """``address:port`` as the user sees it in messages."""
        return f"{self.address}:{self.port}"

    def _known_hosts_label(self) -> str:
        return self.known_hosts or "~/.ssh/known_hosts"

    def _load_known_hosts(self) -> KnownHosts:
        if self._known is not None:
            return self._known
        path = self.known_hosts or os.path.expanduser("~/.ssh/known_hosts")
        try:
            known = known_hosts_mod.load(path)
        except OSError as exc:
            if self.known_hosts is None and not os.path.exists(path):
                known = KnownHosts(path=path)
            else:
                raise HostUnreachable(
                    f"{self.host_name}: known_hosts {path} is not readable ({exc.strerror})",
                    host=self.host_name,
                ) from None
        for w in known.warnings:
            log.warning("%s: %s", self.host_name, w)
        self._pending_warnings += [f"{self.host_name}: {w}" for w in known.warnings]
        self._known = known
        return known

    def _connection(self, address: str, port: int, user: str, gateway: Any) -> Any:
        """One strictly host-key-checked Fabric Connection (not opened)."""
        import paramiko  # lazily: the engine imports no SSH code for local runs
        from fabric import Config, Connection

        config = Config(
            ssh_config=paramiko.SSHConfig(),  # resolved above, explicitly: Fabric's own use would build
            lazy=True,  # ProxyJump gateways with its permissive host-key policy (T2)
            overrides={
                "run": {"in_stream": False, "warn": True, "hide": True, "pty": False},
                "runners": {"remote": _quiet_kill_remote()},
            },
        )
        t = self.connect_timeout_s
        connect_kwargs: dict[str, Any] = {"banner_timeout": t, "auth_timeout": t, "channel_timeout": t}
        files = ([self.ssh_key] if self.ssh_key else []) + [f for f in self.identity_files if f != self.ssh_key]
        connect_kwargs.update(
            key_filename=files,
            allow_agent=_agent_allowed(),
            look_for_keys=not files,  # ssh(1)'s default identities only when none is configured
        )
        conn = Connection(
            address,
            user=user,
            port=port,
            config=config,
            connect_timeout=t,
            connect_kwargs=connect_kwargs,
            inline_ssh_env=True,
            gateway=gateway,
        )
        known = self._load_known_hosts()
        client = conn.client
        known.install(client.get_host_keys())
        client.set_missing_host_key_policy(_StrictPolicy(known))
        return conn

    def _build(self) -> Any:
        """The Connection to this host, through its ProxyJump hops (each opened and checked here,
        so an error names the hop); raises HostUnreachable."""
        gateway = None
        opened: list[Any] = []
        try:
            for hop in _parse_jumps(self.proxy_jump):
                lk = _ssh_config_lookup(self.ssh_config_path, hop.address)
                addr = str(lk.get("hostname") or hop.address)
                port = hop.port or int(lk.get("port") or 22)
                user = hop.user or lk.get("user") or self.user
                gw = self._connection(addr, port, user, gateway)
                started = time.monotonic()
                try:
                    gw.open()
                except _connect_errors() as exc:
                    _quiet_close(gw)
                    why = self._describe_connect_error(exc, time.monotonic() - started, f"{addr}:{port}")
                    raise HostUnreachable(
                        f"{self.host_name}: via bastion {user}@{addr}:{port}: {why.split(': ', 1)[1]}",
                        host=self.host_name,
                    ) from None
                opened.append(gw)
                gateway = gw
        except BaseException:
            for g in reversed(opened):
                _quiet_close(g)
            raise
        self._gateways = opened
        return self._connection(self.address, self.port, self.user, gateway)

    def _open(self) -> Any:
        """The open Connection, connecting on first use; raises HostUnreachable."""
        with self._mu:
            return self._open_locked()

    def _open_locked(self) -> Any:
        if self._conn is not None and self._conn.is_connected:
            return self._conn
        if self._conn is not None:
            self._drop()
        if self.ssh_key and not os.path.isfile(self.ssh_key):
            raise HostUnreachable(f"{self.host_name}: ssh_key {self.ssh_key} does not exist", host=self.host_name)
        conn = self._build()
        started = time.monotonic()
        try:
            conn.open()
        except _connect_errors() as exc:
            elapsed = time.monotonic() - started
            _quiet_close(conn)
            self._close_gateways()
            raise HostUnreachable(self._describe_connect_error(exc, elapsed), host=self.host_name) from None
        if conn.transport is not None:
            conn.transport.set_keepalive(self.keepalive_s)
        self._conn = conn
        log.debug("connected to %s (%s@%s)", self.host_name, self.user, self.target)
        return conn

    def _describe_connect_error(self, exc: BaseException, elapsed: float, target: str | None = None) -> str:
        import paramiko
        from paramiko.ssh_exception import NoValidConnectionsError

        where = f"{self.host_name}: "
        target = target or self.target
        if isinstance(exc, paramiko.SSHException) and str(exc).startswith(REVOKED_MARK):
            line = str(exc)[len(REVOKED_MARK) :].strip()
            return f"{where}host key for {target} is revoked by {line} (@revoked); refusing to connect"
        if isinstance(exc, paramiko.BadHostKeyException):
            return (
                f"{where}host key for {target} does not match known_hosts "
                f"{self._known_hosts_label()} (refusing to connect)"
            )
        if isinstance(exc, paramiko.PasswordRequiredException):
            agent = os.environ.get("SSH_AUTH_SOCK")
            how = (
                "and the agent at SSH_AUTH_SOCK offered no key the host accepts"
                if agent and _agent_allowed()
                else "and no ssh-agent is available (SSH_AUTH_SOCK is not set)"
            )
            return f"{where}key {self.ssh_key} is encrypted {how}; run `ssh-add {self.ssh_key}` or use an unencrypted deploy key"
        if isinstance(exc, paramiko.AuthenticationException):
            key = f" with key {self.ssh_key}" if self.ssh_key else ""
            return f"{where}authentication failed for {self.user}@{target}{key}"
        if isinstance(exc, NoValidConnectionsError):
            return f"{where}cannot connect to {target}: connection refused"
        if isinstance(exc, socket.gaierror):
            return f"{where}cannot resolve address {target.rsplit(':', 1)[0]!r}"
        if isinstance(exc, (TimeoutError, socket.timeout)):
            return f"{where}connect to {target} timed out after {self.connect_timeout_s}s"
        if isinstance(exc, paramiko.SSHException):
            text = str(exc)
            if "not found in known_hosts" in text:
                return (
                    f"{where}host key for {target} is not in known_hosts "
                    f"{self._known_hosts_label()} (refusing to connect)"
                )
            if "No existing session" in text or "banner" in text.lower():
                return (
                    f"{where}{target} accepted TCP but sent no SSH banner within "
                    f"{self.connect_timeout_s}s (after {elapsed:.1f}s)"
                )
            return f"{where}SSH handshake with {target} failed: {text}"
        if isinstance(exc, OSError):
            return f"{where}cannot connect to {target}: {exc.strerror or exc}"
        return f"{where}cannot connect to {target}: {type(exc).__name__}: {exc}"

    def _close_gateways(self) -> None:
        for g in reversed(self._gateways):
            _quiet_close(g)
        self._gateways = []

    def _drop(self) -> None:
        with self._mu:
            if self._conn is not None:
                _quiet_close(self._conn)
            self._conn = None
            self._close_gateways()

    def close(self) -> None:
        """Close the Connection (before any teardown of the host, T10). Idempotent."""
        self._drop()

    def __enter__(self) -> SSHTransport:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ commands

    def render(
        self, argv: list[str], *, timeout_s: float, cwd: str | None = None, env: dict[str, str] | None = None
    ) -> str:
        """The exact string sent to the host: the same call, with the same defaults
        (``timeout -k 10 N``), that the dry-run prints (``planner.display_command``)."""
        return render_remote_command(argv, cwd=cwd, env=env, timeout_s=timeout_s)

    @property
    def jobs_dir(self) -> str:
        """``<remote_root>/jobs`` on the host (relative to the login directory without a remote_root)."""
        root = _field(self.host, "remote_root", None)
        return f"{str(root).rstrip('/')}/jobs" if root else ".orchestrator/jobs"

    def pid_file(self, job: str) -> str:
        return f"{self.jobs_dir}/{job_name(job)}.pid"

    def run(
        self,
        argv: list[str],
        *,
        timeout_s: float,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        log_path: Path | None = None,
    ) -> CommandResult:
        """Run ``argv`` on the host; see :class:`orchestrator.transport.base.Transport`.

        The command runs inside :data:`~orchestrator.transport.framing.WRAPPER_SH`: its own
        process group recorded in ``<remote_root>/jobs/<job>.pid`` (``job`` is the log file's
        stem: ``<phase label>-<step id>``), output read between per-command markers (a login
        banner is dropped and reported once in ``warnings``), killed when the channel closes.
        """
        from invoke.exceptions import CommandTimedOut

        shown = self.render(argv, timeout_s=timeout_s, cwd=cwd, env=env)
        host_timeout = max(1, math.ceil(timeout_s))
        token = new_token()
        job = job_name(Path(log_path).stem) if log_path is not None else f"cmd-{token[5:17]}"
        run_id = Path(log_path).parent.parent.name if log_path is not None else ""
        line = wrap(
            remote_argv(argv, env=env, timeout_s=timeout_s, kill_after_s=KILL_AFTER_S),
            jobs_dir=self.jobs_dir,
            create_jobs_dir=log_path is not None,
            job=job,
            token=token,
            run_id=run_id,
            cwd=cwd,
            grace_s=KILL_AFTER_S,
        )
        conn = self._open()
        started = time.monotonic()
        fields: dict[str, Any]
        key = _register(self, self.pid_file(job), token)
        try:
            try:
                r = conn.run(
                    line, warn=True, hide=True, pty=False, in_stream=False, timeout=host_timeout + CLIENT_GRACE_S
                )
            except CommandTimedOut as exc:
                framed = unframe(exc.result.stdout, exc.result.stderr, token)
                verdict = self._kill_quietly(self.pid_file(job), token)
                fields = dict(
                    exit_code=None,
                    timed_out=True,
                    stdout=framed.stdout,
                    stderr=framed.stderr + f"\n[orchestrator] no answer from {self.host_name} "
                    f"within {host_timeout + CLIENT_GRACE_S}s; its process group on the host: {verdict}",
                )
            except _session_errors() as exc:  # the session died under us
                self._drop()
                framed = unframe("", "", token)
                fields = dict(
                    exit_code=None,
                    lost=True,
                    stdout="",
                    stderr=f"[orchestrator] connection to {self.host_name} lost: {type(exc).__name__}: {exc}",
                )
            else:
                elapsed = time.monotonic() - started
                framed = unframe(r.stdout, r.stderr, token)
                rec = refused_record(framed.stdout, token)
                if rec is not None:
                    raise JobStillRunning(
                        RemoteJob.from_record(rec, host=self.host_name, job=job, pid_file=self.pid_file(job))
                    )
                code = framed.exit_code if framed.exit_code is not None else r.exited
                if r.exited == -1:  # the channel closed without an exit status (T7)
                    self._drop()
                    fields = dict(
                        exit_code=None,
                        lost=True,
                        stdout=framed.stdout,
                        stderr=framed.stderr + f"\n[orchestrator] connection to {self.host_name} lost mid-command",
                    )
                elif code in (124, 137) and elapsed >= host_timeout - 0.5:
                    fields = dict(
                        exit_code=code,
                        timed_out=True,
                        stdout=framed.stdout,
                        stderr=framed.stderr + f"\n[orchestrator] killed on {self.host_name} after {host_timeout}s",
                    )
                else:
                    fields = dict(exit_code=code, stdout=framed.stdout, stderr=framed.stderr)
        finally:
            _unregister(key)
        warnings: list[str] = list(self._pending_warnings)
        self._pending_warnings.clear()
        if framed.banner and not self._banner_reported:
            self._banner_reported = True
            first = framed.banner.strip().splitlines()[0][:120]
            n = len(framed.banner.strip().splitlines())
            warnings.append(
                f"{self.host_name}: the login shell printed {n} line(s) before each command "
                f"(ignored; first: {first!r}); make ~/.bashrc print only in interactive shells"
            )
            log.warning("%s", warnings[-1])
        with self._mu:
            self._undrained += warnings
        result = CommandResult(
            host=self.host_name,
            argv=list(argv),
            duration_s=round(time.monotonic() - started, 3),
            log_path=str(log_path) if log_path else None,
            warnings=warnings,
            **fields,
        )
        if log_path is not None:
            _write_log(Path(log_path), shown, result)
        return result

    def drain_warnings(self) -> list[str]:
        """Warnings not yet taken (each given once): a login banner that is being ignored (T11),
        known_hosts lines skipped (T15, T16). The engine shows them after a step; they are also
        in the ``warnings`` of the first CommandResult that met them."""
        with self._mu:
            out, self._undrained = self._undrained, []
        return out

    # ------------------------------------------------------------------ process groups on the host

    def _control(self, argv: list[str], timeout_s: int) -> str:
        """Run a short host-side control script (no job record) and return its last stdout line.

        Uses the open connection when there is one (a new channel beside a running command),
        else a fresh connection that is closed again; raises HostUnreachable."""
        token = new_token()
        full = shlex.join(["sh", "-c", FRAME_ONLY_SH, "sh", token, "--", *argv])
        with self._mu:
            conn = self._conn if self._conn is not None and self._conn.is_connected else None
        fresh = None
        if conn is None:
            fresh = self._build()
            try:
                fresh.open()
            except _connect_errors() as exc:
                _quiet_close(fresh)
                raise HostUnreachable(self._describe_connect_error(exc, 0.0), host=self.host_name) from None
            conn = fresh
        try:
            r = conn.run(full, warn=True, hide=True, pty=False, in_stream=False, timeout=timeout_s)
        except _session_errors() as exc:
            raise HostUnreachable(
                f"{self.host_name}: control command failed: {type(exc).__name__}: {exc}", host=self.host_name
            ) from None
        finally:
            if fresh is not None:
                _quiet_close(fresh)
        framed = unframe(r.stdout, r.stderr, token)
        lines = framed.stdout.strip().splitlines()
        return lines[-1] if lines else ""

    def kill_job(self, pid_file: str, token: str = "", grace_s: int = 5) -> str:
        """Kill the process group recorded in ``pid_file`` (SIGTERM, SIGKILL after ``grace_s``)
        and wait for it; returns ``gone``, ``terminated``, ``killed`` or ``other``."""
        argv = ["sh", "-c", KILL_SH, "sh", pid_file, token, str(grace_s)]
        return self._control(argv, grace_s + self.connect_timeout_s + 5) or "no answer"

    def _kill_quietly(self, pid_file: str, token: str) -> str:
        try:
            return self.kill_job(pid_file, token, KILL_AFTER_S)
        except Exception as exc:  # noqa: BLE001 - reported in the result, never raised
            return f"not confirmed ({exc})"

    def running_job(self, job: str) -> RemoteJob | None:
        """See :meth:`orchestrator.transport.base.Transport.running_job`."""
        pf = self.pid_file(job)
        out = self._control(["sh", "-c", PROBE_SH, "sh", pf], self.connect_timeout_s + 10)
        if not out.startswith("running "):
            return None
        rec = parse_pid_line(out[len("running ") :])
        if rec is None:
            return None
        return RemoteJob.from_record(rec, host=self.host_name, job=job_name(job), pid_file=pf)

    # ------------------------------------------------------------------ files

    def put(self, local_path: Path, remote_path: str) -> TransferResult:
        """Upload one file atomically: ``mkdir -p`` the parent, upload to a temp name, ``mv``.

        Raises HostUnreachable when the host cannot be reached or is lost during the
        transfer, StepFailed when the host refuses (permissions, disk full).
        """
        local_path = Path(local_path)
        if not remote_path.startswith("/"):
            raise ValueError(f"remote_path: {remote_path!r} is not an absolute path")
        parent, name = posixpath.split(remote_path)
        size = local_path.stat().st_size
        # one round trip: the parent, and no partial upload of this name left by an earlier run (T17)
        mk = self.run(["sh", "-c", _PREPARE_SH, "sh", parent, name], timeout_s=self.connect_timeout_s + 10)
        self._raise_if_bad(mk, f"mkdir -p {parent}")
        tmp = posixpath.join(parent, f".{name}.part-{uuid.uuid4().hex[:12]}")
        conn = self._open()
        sftp = None
        failure: BaseException | None = None
        try:
            try:
                sftp = self._open_sftp(conn)
            except _sftp_handshake_errors() as exc:
                # the login shell printed into the sftp stream (a ~/.bashrc banner, T11): send the
                # bytes over an exec channel instead, whose stdout nobody parses
                log.warning("%s: sftp unusable (%s); uploading over an exec channel", self.host_name, exc)
                self._put_exec(conn, local_path, tmp)
            else:
                sftp.put(str(local_path), tmp, confirm=True)
                sftp.chmod(tmp, local_path.stat().st_mode & 0o777)
        except TimeoutError as exc:  # a wedged sftp-server or host: lost
            self._drop()
            raise HostUnreachable(
                f"{self.host_name}: upload of {local_path.name} to {self.target} failed: {type(exc).__name__}: {exc}",
                host=self.host_name,
            ) from None
        except OSError as exc:  # the host refused a write: find out why, on the host
            failure = exc
        except _session_errors() as exc:
            self._drop()
            raise HostUnreachable(
                f"{self.host_name}: upload of {local_path.name} to {self.target} failed: {type(exc).__name__}: {exc}",
                host=self.host_name,
            ) from None
        finally:
            if sftp is not None:
                _quiet_close(sftp)
        if failure is not None:
            self._upload_refused(failure, local_path, parent, tmp, size)
        mv = self.run(["mv", "-f", "--", tmp, remote_path], timeout_s=self.connect_timeout_s + 10)
        self._raise_if_bad(mv, f"mv {tmp} {remote_path}")
        return TransferResult(host=self.host_name, remote_path=remote_path, bytes=size, detail=f"uploaded {size} bytes")

    def _upload_refused(self, exc: BaseException, local_path: Path, parent: str, tmp: str, size: int) -> None:
        """Remove the partial file and raise StepFailed naming the cause (disk full: "no space
        left on <host>:<path>"; sftp-server reports ENOSPC only as "Failure", so free space is
        measured on the host); HostUnreachable when the host is gone too."""
        try:
            probe = self.run(
                ["sh", "-c", _AFTER_FAILED_UPLOAD_SH, "sh", tmp, parent], timeout_s=self.connect_timeout_s + 10
            )
        except HostUnreachable:
            raise HostUnreachable(
                f"{self.host_name}: upload of {local_path.name} to {self.target} failed and the host is gone: {exc}",
                host=self.host_name,
            ) from None
        if probe.lost or probe.timed_out:
            raise HostUnreachable(
                f"{self.host_name}: upload of {local_path.name} to {self.target} failed and the host is gone: {exc}",
                host=self.host_name,
            )
        free: int | None = None
        words = (probe.stdout.strip().splitlines() or [""])[-1].split()
        if len(words) == 2 and all(w.isdigit() for w in words):
            free = int(words[0]) * int(words[1])
        code = getattr(exc, "errno", None)
        if code in (errno.ENOSPC, errno.EDQUOT) or (free is not None and free < size):
            free_s = f"; {free} bytes free there" if free is not None else ""
            raise StepFailed(
                f"no space left on {self.host_name}:{parent} (upload of {local_path.name}, {size} bytes{free_s}; "
                "the partial file was removed)",
                host=self.host_name,
            )
        raise StepFailed(
            f"{self.host_name}: upload to {tmp} refused: {exc} (the partial file was removed)", host=self.host_name
        )

    def _put_exec(self, conn: Any, local_path: Path, tmp: str) -> None:
        """Upload through ``cat > TMP`` on an exec channel (stdin carries the bytes); raises
        OSError with the host's reason when the write fails (e.g. ENOSPC), TimeoutError when the
        host stops reading for ``transfer_timeout_s``."""
        mode = format(local_path.stat().st_mode & 0o777, "o")
        chan = conn.transport.open_session(timeout=self.connect_timeout_s)
        try:
            chan.settimeout(self.transfer_timeout_s)
            chan.exec_command(shlex.join(["sh", "-c", _CAT_UPLOAD_SH, "sh", tmp, mode, str(local_path.stat().st_size)]))
            with open(local_path, "rb") as fh:
                for chunk in iter(lambda: fh.read(1 << 16), b""):
                    chan.sendall(chunk)
            chan.shutdown_write()
            if not chan.status_event.wait(self.transfer_timeout_s):
                raise TimeoutError(f"no exit status within {self.transfer_timeout_s}s")
            err = b""
            while chan.recv_stderr_ready():
                err += chan.recv_stderr(65536)
            rc = chan.recv_exit_status()
        finally:
            chan.close()
        if rc != 0:
            text = err.decode("utf-8", "replace").strip().splitlines()
            why = text[-1] if text else f"exit {rc}"
            code = errno.ENOSPC if "No space left" in why else errno.EDQUOT if "quota" in why.lower() else None
            raise OSError(code, why)

    def _open_sftp(self, conn: Any) -> Any:
        """An SFTP session whose every read and write, the version handshake included, gives
        up after ``transfer_timeout_s`` idle seconds (Fabric's ``sftp()``/``put()`` have no
        timeout: a wedged sftp-server would hang the run)."""
        import paramiko

        chan = conn.transport.open_session(timeout=self.connect_timeout_s)
        chan.settimeout(self.transfer_timeout_s)
        chan.invoke_subsystem("sftp")
        return paramiko.SFTPClient(chan)

    def _raise_if_bad(self, r: CommandResult, what: str) -> None:
        if r.lost or r.timed_out:
            raise HostUnreachable(f"{self.host_name}: host lost during `{what}`", host=self.host_name)
        if r.exit_code != 0:
            raise StepFailed(
                f"{self.host_name}: `{what}` failed (exit {r.exit_code}): {r.stderr_tail(3)}", host=self.host_name
            )


#: ``mkdir -p`` the upload's parent and remove partial uploads of the same name (``.<name>.part-*``)
#: that a failed or killed earlier run left behind.
_PREPARE_SH = r"""
mkdir -p -- "$1" || exit 1
rm -f -- "$1"/."$2".part-*
"""

#: Receives an upload on stdin (the exec-channel fallback); checks the size that arrived.
_CAT_UPLOAD_SH = r"""
cat > "$1" || exit 1
chmod "$2" -- "$1" || exit 1
got=$(stat -c %s -- "$1") || exit 1
[ "$got" = "$3" ] || { echo "short upload: $got of $3 bytes" >&2; exit 1; }
"""

#: After a refused upload: remove the partial file, print ``<available blocks> <block size>``.
_AFTER_FAILED_UPLOAD_SH = r"""
rm -f -- "$1"
stat -f -c '%a %S' -- "$2" 2>/dev/null || echo unknown
"""

# ---------------------------------------------------------------------- commands in flight

_inflight: dict[int, tuple[SSHTransport, str, str]] = {}
_inflight_lock = threading.Lock()
_inflight_seq = iter(range(1, 1 << 62))


def _register(t: SSHTransport, pid_file: str, token: str) -> int:
    with _inflight_lock:
        key = next(_inflight_seq)
        _inflight[key] = (t, pid_file, token)
    return key


def _unregister(key: int) -> None:
    with _inflight_lock:
        _inflight.pop(key, None)


def inflight() -> list[tuple[str, str]]:
    """``(host, pid file)`` of every remote command this process is running now."""
    with _inflight_lock:
        return [(t.host_name, pf) for t, pf, _ in _inflight.values()]


def terminate_remote(kill_after_s: float = 2.0, bound_s: float = 30.0) -> int:
    """Kill the process group of every remote command in flight, on all hosts at once, over a
    new channel (or a fresh connection when the command's own is gone); return once each host
    confirmed (or ``bound_s`` passed). Called by ``local.terminate_all`` on an interrupt, before
    the engine records ``interrupted``."""
    with _inflight_lock:
        jobs = list(_inflight.values())
    if not jobs:
        return 0
    grace = max(1, math.ceil(kill_after_s))
    verdicts: dict[int, str] = {}

    def kill(i: int, t: SSHTransport, pf: str, tok: str) -> None:
        try:
            verdicts[i] = t.kill_job(pf, tok, grace)
        except Exception as exc:  # noqa: BLE001 - best effort, reported in the log
            verdicts[i] = f"not confirmed: {exc}"

    threads = [
        threading.Thread(target=kill, args=(i, t, pf, tok), daemon=True, name="orchestrator-kill")
        for i, (t, pf, tok) in enumerate(jobs)
    ]
    for th in threads:
        th.start()
    deadline = time.monotonic() + bound_s
    again: KeyboardInterrupt | None = None
    for th in threads:
        while th.is_alive() and time.monotonic() < deadline:
            try:  # a second Ctrl-C must not cut the kills short: finish them, then pass it on
                th.join(max(0.0, min(0.2, deadline - time.monotonic())))
            except KeyboardInterrupt as exc:
                again = exc
    for i, (t, pf, _) in enumerate(jobs):
        log.warning("interrupt: %s: %s -> %s", t.host_name, pf, verdicts.get(i, "no answer within the bound"))
    if again is not None:
        raise again
    return len(jobs)


register_terminator(terminate_remote)


# ---------------------------------------------------------------------- ssh_config, jumps, policy


def _ssh_config_path() -> str | None:
    """``$ORCHESTRATOR_SSH_CONFIG`` (``none``: no file), else ``~/.ssh/config`` when it exists."""
    env = os.environ.get("ORCHESTRATOR_SSH_CONFIG")
    if env is not None:
        return None if env.strip().lower() in ("", "none") else os.path.expanduser(env)
    default = os.path.expanduser("~/.ssh/config")
    return default if os.path.isfile(default) else None


def _ssh_config_lookup(path: str | None, name: str) -> dict[str, Any]:
    """What ssh_config says for ``name`` (``hostname``, ``port``, ``user``, ``identityfile``,
    ``proxyjump``); empty without a file. An unreadable or invalid file is a HostUnreachable."""
    if not path:
        return {}
    import paramiko

    try:
        cfg = paramiko.SSHConfig.from_path(path)
        found = dict(cfg.lookup(name))
    except (OSError, paramiko.ssh_exception.ConfigParseError, ValueError) as exc:
        raise HostUnreachable(f"{name}: ssh_config {path} cannot be used: {exc}", host=name) from None
    return found


def _agent_allowed() -> bool:
    return os.environ.get("ORCHESTRATOR_SSH_AGENT", "1") != "0"


class _Hop:
    def __init__(self, user: str | None, address: str, port: int | None) -> None:
        self.user, self.address, self.port = user, address, port


def _parse_jumps(spec: str | None) -> list[_Hop]:
    """``[user@]host[:port][,...]`` (ssh -J syntax) as hops, first hop first."""
    hops: list[_Hop] = []
    for part in (spec or "").split(","):
        part = part.strip()
        if not part:
            continue
        if part.startswith("ssh://"):
            part = part[len("ssh://") :]
        user, _, hostport = part.rpartition("@")
        address, port = hostport, None
        if hostport.startswith("["):
            address, _, rest = hostport[1:].partition("]")
            port = int(rest[1:]) if rest.startswith(":") else None
        elif hostport.count(":") == 1:
            address, _, p = hostport.partition(":")
            port = int(p)
        hops.append(_Hop(user or None, address, port))
    return hops


#: Marks the SSHException that :class:`_StrictPolicy` raises for a revoked key.
REVOKED_MARK = "[revoked host key]"


class _StrictPolicy:
    """Reject unknown host keys (T2), naming the ``@revoked`` line when the key is revoked (T14)."""

    def __init__(self, known: KnownHosts) -> None:
        self.known = known

    def missing_host_key(self, client: Any, hostname: str, key: Any) -> None:
        import paramiko

        rev = self.known.revoked_entry(key)
        if rev is not None:
            raise paramiko.SSHException(f"{REVOKED_MARK} {rev.where}")
        raise paramiko.SSHException(f"Server {hostname!r} not found in known_hosts")


def _connect_errors() -> tuple[type[BaseException], ...]:
    """What connecting can raise: SSH protocol/auth/host-key errors, socket errors, EOF."""
    import paramiko

    return (paramiko.SSHException, OSError, EOFError)


def _sftp_handshake_errors() -> tuple[type[BaseException], ...]:
    """What opening SFTP raises when something else speaks on the channel (a login banner)."""
    import paramiko
    from paramiko.sftp import SFTPError

    return (SFTPError, paramiko.SSHException, EOFError)


def _session_errors() -> tuple[type[BaseException], ...]:
    """What a command or transfer raises when the connection dies under it."""
    import paramiko
    from invoke.exceptions import ThreadException

    return (paramiko.SSHException, OSError, EOFError, ThreadException)


@functools.cache
def _quiet_kill_remote() -> Any:
    """Fabric's Remote runner with a ``kill`` that tolerates a transport already gone.

    A ``run(timeout=...)`` arms a threading.Timer whose ``kill`` closes the channel; on a host that
    froze or dropped, sending that close raises EOFError (or OSError) in the timer thread, which
    Python prints as an unhandled-thread traceback on the user's terminal. The channel is marked
    closed before the send, and the timeout itself still reaches ``run`` (CommandTimedOut), so the
    error is only logged."""
    from fabric.runners import Remote

    class QuietKillRemote(Remote):  # type: ignore[misc]
        def kill(self) -> None:
            try:
                super().kill()
            except _session_errors() as exc:
                log.debug("timeout kill of a dead channel: %s: %s", type(exc).__name__, exc)

    return QuietKillRemote


def _quiet_close(conn: Any) -> None:
    try:
        conn.close()
    except Exception:  # noqa: BLE001 - closing a broken connection may raise anything
        pass


def _write_log(path: Path, line: str, r: CommandResult) -> None:
    """Write the logs the way the local transport does: ``path`` holds the command sent,
    stderr and a status trailer; ``path.stdout`` holds stdout exactly (the step's JSON).
    Both are written atomically."""
    path.parent.mkdir(parents=True, exist_ok=True)
    trailer = (
        f"[orchestrator] host={r.host} exit={r.exit_code} timed_out={r.timed_out} "
        f"lost={r.lost} duration_s={r.duration_s:.3f}"
    )
    err = r.stderr if not r.stderr or r.stderr.endswith("\n") else r.stderr + "\n"
    atomic_write_text(path, f"$ {line}\n{err}{trailer}\n")
    atomic_write_text(path.with_suffix(".stdout"), r.stdout)
