"""Fixtures for the SGLang plugin, the probe, the stand-in server and the cut-over verbs.

SGLang tests need the pinned package (``pip install --no-deps -r
tests/integration/requirements-sglang.txt``) and skip with the reason otherwise. On a
machine without CUDA they run SGLang's Triton index kernels in Triton's interpreter
(``TRITON_INTERPRET=1``, set before SGLang is first imported) and let PyPI's CUDA
torchvision import through ``torchvision_cpu_shim``.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

from cutover_helpers import run_cutover  # noqa: E402

from tests.support.net import free_port  # noqa: E402
from tests.support.sglang_standin import Standin  # noqa: E402

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
        _SGLANG["error"] = (
            f"sglang==0.5.23 not importable ({type(exc).__name__}: {exc}); "
            "install tests/integration/requirements-sglang.txt with --no-deps"
        )
        return _SGLANG["error"]
    _SGLANG["ok"] = True
    return None


@pytest.fixture(autouse=True)
def _fresh_plugin_process_state(monkeypatch):
    """Each test starts like a new service process: no rank record, not in prebuilt-only mode
    (register() sets MLA_VERIFY_PREBUILT_ONLY=1 as in a service; monkeypatch undoes it)."""
    monkeypatch.setenv("MLA_VERIFY_PREBUILT_ONLY", "0")
    from sglang_verify_plugin.config import reset_process_record

    reset_process_record()
    yield
    reset_process_record()


@pytest.fixture(scope="session")
def sglang_ready() -> None:
    reason = _import_sglang()
    if reason:
        pytest.skip(reason)


@pytest.fixture
def registered(sglang_ready, monkeypatch):
    """Register the plugin with a config chosen by the test; SGLang's factory restored after."""
    import sglang_verify_plugin as plugin
    from sglang_verify_plugin.config import VerifyConfig

    state = {"config": VerifyConfig("bundled", "f" * 64, False, "test: bundled")}
    assert plugin.register(lambda: state["config"])
    yield state
    plugin.unregister()


# ----------------------------------------------------------------------------- stand-in


@pytest.fixture
def standin(tmp_path):
    """A stand-in started in a fresh remote_root; stopped (by pidfile) at teardown."""
    root = tmp_path / "remote_root"
    root.mkdir()
    s = Standin(root, free_port())
    yield s
    s.stop()


@pytest.fixture
def cutover():
    return run_cutover
