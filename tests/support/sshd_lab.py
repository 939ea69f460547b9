"""The sshd lab: real sshd processes on loopback addresses (127.0.0.2, 127.0.0.3, ...).

The one implementation every SSH test uses (tests/ssh, tests/integration, tests/core).
Each host gets its own sshd, host key, config and log under ``DIR/<name>/``; one client key
is authorized on all of them and ``DIR/known_hosts`` holds one ``[addr]:port`` line per host
(docs/ssh-traps.md, T9). Everything is stopped by PID: the listener's per-connection
children first (they outlive the listener, T10), then the listener.

In a pytest fixture (skips with the reason where sshd is missing; at teardown stops the lab
and fails if one of its sshd survived)::

    @pytest.fixture
    def lab(tmp_path):
        with sshd_lab.running_lab(tmp_path / "lab", 3) as lab:
            yield lab

Python::

    lab = start_lab(Path("/tmp/lab"), 3)
    ...
    lab.stop()

Shell (CI)::

    python tests/support/sshd_lab.py up DIR N   # prints name addr port pid per host; writes DIR/inventory.yaml
    python tests/support/sshd_lab.py down DIR   # stops the PIDs recorded in DIR/lab.json
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import types
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

if not __package__:  # run as a script (the shell interface): make `tests.support` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.support.net import free_port, wait_banner  # noqa: E402

SSHD = Path("/usr/sbin/sshd")
SFTP_SERVER = Path("/usr/lib/openssh/sftp-server")
PRIVSEP_DIR = Path("/run/sshd")
READY_TIMEOUT_S = 10.0


def sshd_missing_reason() -> str | None:
    """Why the lab cannot run here, or None when it can."""
    if not SSHD.exists():
        return f"{SSHD} not installed (apt-get install openssh-server)"
    if not SFTP_SERVER.exists():
        return f"{SFTP_SERVER} not installed"
    if not _which("ssh-keygen"):
        return "ssh-keygen not on PATH"
    return None


def _which(name: str) -> str | None:
    for d in os.environ.get("PATH", "").split(os.pathsep):
        p = Path(d, name)
        if p.is_file() and os.access(p, os.X_OK):
            return str(p)
    return None


def _atomic_write(path: Path, text: str, mode: int = 0o644) -> None:
    tmp = path.with_name(f".{path.name}.tmp.{os.getpid()}")
    with open(tmp, "w") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())
    os.chmod(tmp, mode)
    os.replace(tmp, path)


def keygen(path: Path) -> str:
    """Create an ed25519 key pair at ``path`` and return the public line's first two fields."""
    for p in (path, path.with_suffix(".pub")):
        p.unlink(missing_ok=True)
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "lab", "-f", str(path)],
        check=True,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
    )
    return " ".join(path.with_suffix(".pub").read_text().split()[:2])


def known_hosts_line(address: str, port: int, pubkey: str) -> str:
    """``[addr]:port key`` for a non-22 port, the bare address on 22 (T9)."""
    target = address if port == 22 else f"[{address}]:{port}"
    return f"{target} {pubkey}"


def wait_for_banner(address: str, port: int, timeout_s: float = READY_TIMEOUT_S) -> None:
    """Return once ``address:port`` answers with an SSH banner; raise TimeoutError otherwise."""
    wait_banner(address, port, b"SSH-", timeout_s)


# ---------------------------------------------------------------- processes by PID


def _ppid(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # the command name (field 2) may contain spaces; fields after the last ')' are fixed
    return int(stat.rsplit(")", 1)[1].split()[1])


def is_live(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def descendants(pid: int) -> list[int]:
    """All live descendants of ``pid`` (walks ``/proc/*/stat`` parent links)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            parent = _ppid(int(entry.name))
            if parent is not None:
                children.setdefault(parent, []).append(int(entry.name))
    out: list[int] = []
    todo = list(children.get(pid, []))
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(children.get(p, []))
    return out


def session_pids(address: str, port: int) -> list[int]:
    """Live processes started by an sshd for ``address:port`` (their ``SSH_CONNECTION``)."""
    suffix = f" {address} {port}".encode()
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            env = (entry / "environ").read_bytes()
        except OSError:
            continue
        for var in env.split(b"\0"):
            if var.startswith(b"SSH_CONNECTION=") and var.endswith(suffix):
                if is_live(int(entry.name)):
                    out.append(int(entry.name))
                break
    return out


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def pids_with(marker: str) -> list[int]:
    """Live processes whose command line contains ``marker`` (never this test process)."""
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid() and marker in cmdline(int(entry.name)):
            if is_live(int(entry.name)):
                out.append(int(entry.name))
    return out


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def _wait_gone(pids: list[int], timeout_s: float) -> list[int]:
    deadline = time.monotonic() + timeout_s
    left = [p for p in pids if is_live(p)]
    while left and time.monotonic() < deadline:
        time.sleep(0.02)
        for p in left:
            try:  # reap it when it is our own child
                os.waitpid(p, os.WNOHANG)
            except ChildProcessError:
                pass
        left = [p for p in left if is_live(p)]
    return left


# ---------------------------------------------------------------- the lab


@dataclass
class LabHost:
    name: str
    address: str
    port: int
    dir: str
    pid: int | None = None
    host_pubkey: str = ""

    @property
    def config(self) -> str:
        return str(Path(self.dir, "sshd_config"))

    @property
    def log(self) -> str:
        return str(Path(self.dir, "sshd.log"))


@dataclass
class Lab:
    root: str
    client_key: str
    known_hosts: str
    hosts: list[LabHost] = field(default_factory=list)
    user: str = "root"

    # -- lifecycle
    def save(self) -> None:
        _atomic_write(Path(self.root, "lab.json"), json.dumps(asdict(self), indent=2) + "\n")

    @classmethod
    def load(cls, root: Path) -> Lab:
        raw = json.loads(Path(root, "lab.json").read_text())
        raw["hosts"] = [LabHost(**h) for h in raw["hosts"]]
        return cls(**raw)

    def host(self, name: str) -> LabHost:
        for h in self.hosts:
            if h.name == name:
                return h
        raise KeyError(name)

    def start_host(self, h: LabHost) -> None:
        """Start (or restart) ``h``'s sshd and wait for its banner."""
        with open(h.log, "ab") as log:
            proc = subprocess.Popen(
                [str(SSHD), "-D", "-e", "-f", h.config],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                start_new_session=True,
            )
        h.pid = proc.pid
        try:
            wait_for_banner(h.address, h.port)
        except TimeoutError as exc:
            self.kill_host(h.name)
            raise RuntimeError(f"{h.name}: sshd did not start; log: {Path(h.log).read_text()[-800:]}") from exc
        self.save()

    def kill_host(self, name: str, sig: int = signal.SIGKILL) -> list[int]:
        """Kill ``name``'s listener and every per-connection process by PID; return the PIDs.

        The listener's descendants are collected before it dies (they are re-parented after);
        commands already orphaned (their listener killed earlier) are found by the
        ``SSH_CONNECTION`` sshd gave them, which names this host's address and port.
        """
        h = self.host(name)
        victims = session_pids(h.address, h.port)
        if h.pid is not None and is_live(h.pid) and h.config in cmdline(h.pid):
            victims = descendants(h.pid) + [h.pid] + victims
        victims = list(dict.fromkeys(p for p in victims if p != os.getpid()))
        for p in victims:
            _signal(p, sig)
        left = _wait_gone(victims, 5.0)
        for p in left:
            _signal(p, signal.SIGKILL)
        _wait_gone(left, 2.0)
        h.pid = None
        self.save()
        return victims

    def stop(self) -> None:
        """Stop every host (SIGTERM, then SIGKILL for what is left)."""
        for h in self.hosts:
            self.kill_host(h.name, signal.SIGTERM)

    def pids(self) -> list[int]:
        return [h.pid for h in self.hosts if h.pid is not None]

    def stop_and_list_survivors(self) -> list[int]:
        """:meth:`stop`, then the listener PIDs that are still alive (a clean teardown has none)."""
        pids = self.pids()
        self.stop()
        return [p for p in pids if is_live(p)]

    # -- clients
    def write_known_hosts(self, path: Path | None = None, *, wrong_key_for: set[str] = frozenset()) -> Path:
        """Write a known_hosts file; hosts in ``wrong_key_for`` get a freshly generated foreign key."""
        lines = []
        for h in self.hosts:
            key = h.host_pubkey
            if h.name in wrong_key_for:
                key = keygen(Path(self.root, f"foreign_{h.name}_key"))
            lines.append(known_hosts_line(h.address, h.port, key))
        out = Path(path or self.known_hosts)
        _atomic_write(out, "\n".join(lines) + "\n")
        return out


def inventory_doc(
    lab: Lab, remote_base: Path, *, python: str | None = None, hosts: list[str] | None = None, **defaults: object
) -> dict:
    """An inventory (docs/contract.md format) for the lab's hosts; each host has its own remote_root.

    ``defaults`` override the generated ``defaults:`` (e.g. ``connect_timeout_s=2``).
    """
    d: dict = {
        "connection": "ssh",
        "user": lab.user,
        "ssh_key": lab.client_key,
        "known_hosts": lab.known_hosts,
        "python": python or sys.executable,
        "arch": "sm_120a",
        "connect_timeout_s": 10,
        "command_timeout_s": 600,
    }
    d.update(defaults)
    names = hosts or [h.name for h in lab.hosts]
    return {
        "defaults": d,
        "hosts": [
            {
                "name": n,
                "address": lab.host(n).address,
                "port": lab.host(n).port,
                "remote_root": str(Path(remote_base, n)),
            }
            for n in names
        ],
    }


def write_inventory(path: Path, doc: dict) -> Path:
    import yaml  # only needed here

    Path(path).parent.mkdir(parents=True, exist_ok=True)
    _atomic_write(Path(path), yaml.safe_dump(doc, sort_keys=False))
    return Path(path)


def _sshd_config(h: LabHost, authorized_keys: Path) -> str:
    return "\n".join(
        [
            f"ListenAddress {h.address}:{h.port}",
            f"HostKey {Path(h.dir, 'ssh_host_ed25519_key')}",
            f"PidFile {Path(h.dir, 'sshd.pid')}",
            f"AuthorizedKeysFile {authorized_keys}",
            "PermitRootLogin prohibit-password",
            "PasswordAuthentication no",
            "KbdInteractiveAuthentication no",
            "PubkeyAuthentication yes",
            "UsePAM no",
            "StrictModes no",
            "MaxStartups 64:30:128",
            "LogLevel ERROR",
            # bash sources ~/.bashrc when sshd starts it at SHLVL < 2 (Debian's SSH_SOURCE_BASHRC). A lab host
            # is this machine's root, whose ~/.bashrc is not the tests' to choose: on a machine with pyenv in it,
            # a session killed mid `pyenv rehash` (by a fault test, most likely) left its lock file behind and every
            # later session waited 60 s for it (session 42: 16 of tests/ssh/test_transport.py failed). A remote
            # shell's own start-up is specified where a test wants one (faultkit.add_banner).
            "SetEnv SHLVL=1",
            f"Subsystem sftp {SFTP_SERVER}",
            "",
        ]
    )


def start_lab(root: Path, n: int, *, first_address: int = 2, port: int | None = None, prefix: str = "h") -> Lab:
    """Generate keys and configs under ``root`` and start ``n`` sshd on 127.0.0.{2..}.

    ``port`` None picks a free port per address (so parallel labs do not collide).
    """
    reason = sshd_missing_reason()
    if reason:
        raise RuntimeError(reason)
    if not 1 <= n <= 200:
        raise ValueError(f"n: {n} hosts is outside 1..200")
    root = Path(root).resolve()
    root.mkdir(parents=True, exist_ok=True)
    PRIVSEP_DIR.mkdir(mode=0o755, parents=True, exist_ok=True)
    client_key = root / "client_key"
    client_pub = keygen(client_key)
    authorized = root / "authorized_keys"
    _atomic_write(authorized, client_pub + "\n", 0o600)
    lab = Lab(root=str(root), client_key=str(client_key), known_hosts=str(root / "known_hosts"))
    for i in range(n):
        address = f"127.0.0.{first_address + i}"
        hdir = root / f"{prefix}{i + 1}"
        hdir.mkdir(exist_ok=True)
        h = LabHost(
            name=f"{prefix}{i + 1}",
            address=address,
            port=port if port is not None else free_port(address),
            dir=str(hdir),
        )
        h.host_pubkey = keygen(hdir / "ssh_host_ed25519_key")
        _atomic_write(Path(h.config), _sshd_config(h, authorized))
        lab.hosts.append(h)
    lab.write_known_hosts()
    lab.save()
    try:
        for h in lab.hosts:
            lab.start_host(h)
    except BaseException:
        lab.stop()
        raise
    return lab


def write_lab_inventory(lab: Lab) -> Path:
    """``<root>/inventory.yaml`` for every lab host, remote roots ``<root>/remote/<name>``."""
    return write_inventory(Path(lab.root, "inventory.yaml"), inventory_doc(lab, Path(lab.root, "remote")))


@contextmanager
def running_lab(root: Path, n: int, **start: Any) -> Iterator[Lab]:
    """A started lab for the ``with`` body; the way tests start one (fixtures: ``with ... as lab: yield lab``).

    Skips the test, with the reason, where sshd is missing; starts ``n`` hosts under ``root``
    (``start`` goes to :func:`start_lab`) and writes ``root/inventory.yaml``
    (:func:`write_lab_inventory`); on leaving stops every host by PID and, unless the body
    raised, fails if one of its sshd survived.
    """
    import pytest

    reason = sshd_missing_reason()
    if reason:
        pytest.skip(f"ssh lab unavailable: {reason}")
    lab = start_lab(root, n, **start)
    try:
        write_lab_inventory(lab)
        yield lab
    finally:
        survivors = lab.stop_and_list_survivors()
    assert not survivors, f"sshd {survivors} of the lab under {root} survived teardown"


@contextmanager
def lab_factory(root: Path) -> Iterator[Callable[..., Lab]]:
    """For tests that kill or reconfigure hosts: ``start(n, **start_lab_kw)`` starts a private lab
    under ``root`` (any number of them); on leaving, every one is stopped by PID and, unless the
    body raised, a surviving sshd fails the test. Skips where sshd is missing, like :func:`running_lab`."""
    import pytest

    reason = sshd_missing_reason()
    if reason:
        pytest.skip(f"ssh lab unavailable: {reason}")
    labs: list[Lab] = []

    def start(n: int, **kw: Any) -> Lab:
        lab = start_lab(Path(root) / f"lab{len(labs)}", n, **kw)
        labs.append(lab)
        return lab

    try:
        yield start
    finally:
        survivors = [p for lab in labs for p in lab.stop_and_list_survivors()]
    assert not survivors, f"sshd {survivors} survived teardown"


def lab_host(lab: Lab, name: str, remote_root: Path | str, **overrides: Any) -> types.SimpleNamespace:
    """An inventory-like host (the fields SSHTransport and the bundle code read) for ``lab``'s
    ``name``, with its own ``remote_root``; ``overrides`` replace any field."""
    h = lab.host(name)
    fields: dict[str, Any] = dict(
        name=h.name,
        address=h.address,
        port=h.port,
        user=lab.user,
        connection="ssh",
        ssh_key=lab.client_key,
        known_hosts=lab.known_hosts,
        remote_root=str(remote_root),
        python=sys.executable,
        arch="sm_120a",
        groups=[],
        service=None,
        proxy_jump=None,
        connect_timeout_s=10,
        command_timeout_s=60,  # generous: a loaded CI box is slow to fork sshd
    )
    fields.update(overrides)
    return types.SimpleNamespace(**fields)


def _main(argv: list[str]) -> int:
    usage = "usage: sshd_lab.py up DIR N | sshd_lab.py down DIR"
    if len(argv) == 3 and argv[0] == "up":
        if not argv[2].isdigit() or not 1 <= int(argv[2]) <= 200:
            print(f"sshd_lab.py up: N must be a whole number 1..200, got {argv[2]!r}", file=sys.stderr)
            return 2
        reason = sshd_missing_reason()
        if reason:
            print(f"sshd_lab.py up: {reason}", file=sys.stderr)
            return 75
        try:
            lab = start_lab(Path(argv[1]), int(argv[2]))
        except (OSError, RuntimeError, subprocess.CalledProcessError) as exc:
            print(f"sshd_lab.py up: {exc}", file=sys.stderr)
            return 1
        inv = write_lab_inventory(lab)
        for h in lab.hosts:
            print(h.name, h.address, h.port, h.pid)
        print(f"known_hosts {lab.known_hosts}\nclient_key {lab.client_key}\ninventory {inv}")
        return 0
    if len(argv) == 2 and argv[0] == "down":
        if not Path(argv[1], "lab.json").exists():
            print(f"{argv[1]}/lab.json: no lab recorded here", file=sys.stderr)
            return 2
        lab = Lab.load(Path(argv[1]))
        before = lab.pids()
        lab.stop()
        print("stopped", " ".join(map(str, before)) or "nothing")
        return 0
    print(usage, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
