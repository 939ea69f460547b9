"""Helpers of the SSH tests (imported by name, so they do not depend on which ``conftest``
module pytest loaded last): lab hosts as inventory-like objects, a silent TCP server, and a
tiny bundle. The sshd lab itself is tests/support/sshd_lab.py.
"""

from __future__ import annotations

import socket
import threading
import types
from pathlib import Path

from orchestrator.bundle import Bundle, build_bundle
from tests.support.sshd_lab import Lab, lab_host


def make_host(lab: Lab, name: str, remote_base: Path, **overrides) -> types.SimpleNamespace:
    """A lab host whose remote_root is ``remote_base/"remote <name>"`` (a space on purpose) unless overridden."""
    overrides.setdefault("remote_root", remote_base / f"remote {name}")
    return lab_host(lab, name, **overrides)


class SilentServer:
    """Accepts TCP connections and never says a word (a wedged sshd)."""

    def __init__(self, address: str = "127.0.0.250") -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind((address, 0))
        self.sock.listen(16)
        self.address, self.port = self.sock.getsockname()
        self.accepted: list[socket.socket] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        self.sock.settimeout(0.1)
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            self.accepted.append(conn)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(2)
        for c in self.accepted:
            c.close()
        self.sock.close()


def make_bundle(tmp: Path, marker: str = "v1") -> Bundle:
    """A small kernels/ tree packed with build_bundle (independent of the real kernels/)."""
    src = tmp / f"src-{marker}"
    (src / "kernels" / "csrc").mkdir(parents=True, exist_ok=True)
    (src / "kernels" / "__init__.py").write_text(f'VERSION = "{marker}"\n')
    (src / "kernels" / "hello.py").write_text(
        "import json, sys\nprint(json.dumps({'ok': True, 'argv': sys.argv[1:]}))\n"
    )
    (src / "kernels" / "csrc" / "k.cu").write_text(f"// kernel {marker}\n__global__ void k() {{}}\n")
    (src / "kernels" / "MANIFEST").write_text("*.py\ncsrc/*.cu\n")
    return build_bundle(src, tmp / "bundles")
