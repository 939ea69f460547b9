"""Fixtures for the SGLang plugin, the probe, the stand-in server and the cut-over verbs.

SGLang tests need the pinned package (``pip install --no-deps -r
tests/integration/requirements-sglang.txt``) and skip with the reason otherwise. On a
machine without CUDA they run SGLang's Triton index kernels in Triton's interpreter
(``TRITON_INTERPRET=1``, set before SGLang is first imported) and let PyPI's CUDA
torchvision import through ``torchvision_cpu_shim``.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

_SGLANG: dict[str, Any] = {}


def _import_sglang() -> str | None:
    """Import what the plugin tests use; return the reason it cannot be, or None."""
    if "error" in _SGLANG:
        return _SGLANG["error"]
    if _SGLANG.get("ok"):
        return None
    try:
        import torch

        if not torch.cuda.is_available():
            os.environ.setdefault("TRITON_INTERPRET", "1")
        import torchvision_cpu_shim

        torchvision_cpu_shim.install()
        import sglang  # noqa: F401
        from sglang.srt.layers.attention.triton_backend import TritonAttnBackend  # noqa: F401
        from sglang.test.kits.attention_unittest.attention_methods import mla_attention  # noqa: F401
    except Exception as exc:  # any import failure: the reason goes into the skip message
        _SGLANG["error"] = (f"sglang==0.5.23 not importable ({type(exc).__name__}: {exc}); "
                            "install tests/integration/requirements-sglang.txt with --no-deps")
        return _SGLANG["error"]
    _SGLANG["ok"] = True
    return None


@pytest.fixture(scope="session")
def sglang_ready() -> None:
    reason = _import_sglang()
    if reason:
        pytest.skip(reason)


@pytest.fixture
def registered(sglang_ready, monkeypatch):
    """Register the plugin with a config chosen by the test; SGLang's factory restored after."""
    import kernels.sglang_plugin as plugin
    from kernels.sglang_plugin.config import VerifyConfig

    state = {"config": VerifyConfig("bundled", "f" * 64, False, "test: bundled")}
    assert plugin.register(lambda: state["config"])
    yield state
    plugin.unregister()


# ----------------------------------------------------------------------------- stand-in


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def make_bundle(root: Path, sha: str) -> Path:
    """An unpacked bundle dir as the engine leaves it: kernels/ and .sha256."""
    d = root / "bundles" / sha
    (d / "kernels").mkdir(parents=True, exist_ok=True)
    (d / "kernels" / "__init__.py").write_text("")
    (d / ".sha256").write_text(sha + "\n")
    return d


@dataclass
class Standin:
    """A stand-in SGLang server on 127.0.0.1:port whose state lives under root."""

    root: Path
    port: int

    @property
    def health_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/health"

    @property
    def generate_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/generate"

    @property
    def restart_argv(self) -> list[str]:
        return [sys.executable, str(HERE / "standin_launcher.py"), "restart", "--root", str(self.root),
                "--port", str(self.port)]

    @property
    def restart_json(self) -> str:
        return json.dumps(self.restart_argv)

    def control(self, **modes: Any) -> None:
        (self.root / "standin_control.json").write_text(json.dumps(modes))

    def restart(self) -> None:
        subprocess.run(self.restart_argv, check=True, capture_output=True, timeout=30)

    def stop(self) -> None:
        subprocess.run([sys.executable, str(HERE / "standin_launcher.py"), "stop", "--root", str(self.root),
                        "--port", str(self.port)], check=False, capture_output=True, timeout=30)

    def wait_up(self, timeout_s: float = 15.0) -> dict:
        import urllib.request

        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(self.health_url, timeout=1) as r:
                    return json.loads(r.read())
            except OSError:
                time.sleep(0.1)
        raise AssertionError(f"stand-in on port {self.port} did not come up in {timeout_s}s")


@pytest.fixture
def standin(tmp_path):
    """A stand-in started in a fresh remote_root; stopped (by pidfile) at teardown."""
    root = tmp_path / "remote_root"
    root.mkdir()
    s = Standin(root, free_port())
    yield s
    s.stop()


def run_cutover(*args: str, timeout: float = 120.0) -> tuple[int, dict]:
    """Run ``python -m kernels.cutover ARGS --json`` as the engine would; (exit code, document)."""
    proc = subprocess.run([sys.executable, "-m", "kernels.cutover", *args, "--json"], cwd=REPO,
                          capture_output=True, text=True, timeout=timeout)
    lines = proc.stdout.strip().splitlines()
    assert len(lines) == 1, f"expected one JSON line, got stdout={proc.stdout!r} stderr={proc.stderr[-500:]!r}"
    return proc.returncode, json.loads(lines[0])


@pytest.fixture
def cutover():
    return run_cutover
