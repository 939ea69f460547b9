"""cutover_agent.probe: the installed sglang passes; a changed surface fails closed, named."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.support.paths import KERNELS  # noqa: E402

REPO = Path(__file__).resolve().parents[2]


def _probe(*args: str, env_path: str | None = None) -> tuple[int, dict]:
    import os

    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [env_path, str(KERNELS)]))
    proc = subprocess.run(
        [sys.executable, "-m", "cutover_agent.probe", "--json", *args],
        cwd=KERNELS,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    lines = proc.stdout.strip().splitlines()
    assert len(lines) == 1, f"one JSON document expected, got {proc.stdout!r} / {proc.stderr[-400:]!r}"
    return proc.returncode, json.loads(lines[0])


@pytest.mark.sglang
def test_the_installed_sglang_is_compatible_and_uses_the_verify_hook(sglang_ready):
    from cutover_agent.probe import run_probe

    doc = run_probe()
    assert doc["mismatches"] == [] and doc["compatible"] is True and doc["ok"] is True
    assert doc["sglang_version"] == "0.5.23" and doc["version_tested"] is True
    assert doc["verify_route"] == "hook"
    assert doc["extend_attention_module"] == "sglang.kernels.ops.attention.extend_attention"
    assert all(doc["checks"].values()) and len(doc["checks"]) == 9


def _fake_sglang(root: Path) -> None:
    """An sglang whose layout changed: no 'triton' entry, renamed parameters, no plugins."""
    files = {
        "sglang/__init__.py": '__version__ = "0.9.0"\n',
        "sglang/srt/__init__.py": "",
        "sglang/srt/layers/__init__.py": "",
        "sglang/srt/layers/attention/__init__.py": "",
        "sglang/srt/layers/attention/attention_registry.py": "ATTENTION_BACKENDS = {'flashinfer': object}\n",
        "sglang/srt/layers/attention/triton_backend.py": textwrap.dedent("""
            from dataclasses import dataclass

            @dataclass
            class ForwardMetadata:
                qo_indptr: object
                kv_indptr: object
                kv_indices: object

            class TritonAttnBackend:
                def forward_extend(self, q, k, v, layer, batch, save_kv_cache=True):
                    pass
                def init_cuda_graph_state(self, max_bs, max_num_tokens):
                    pass
                def init_forward_metadata(self, forward_batch):
                    pass
            """),
        "sglang/srt/model_executor/__init__.py": "",
        "sglang/srt/model_executor/forward_batch_info.py": "class ForwardMode:\n    EXTEND = 1\n",
        "sglang/kernels/__init__.py": "",
        "sglang/kernels/ops/__init__.py": "",
        "sglang/kernels/ops/attention/__init__.py": "",
        "sglang/kernels/ops/attention/extend_attention.py": textwrap.dedent("""
            def extend_attention_fwd(q_extend, k_extend, v_extend, o_extend, k_buffer, v_buffer,
                                     qo_indptr, kv_indptr, kv_indices, mask, is_causal, mask_indptr,
                                     max_len_extend, k_scale=1.0, v_scale=1.0, sm_scale=None):
                pass
            """),
    }
    for rel, text in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)


def test_a_changed_sglang_layout_fails_closed_with_every_mismatch_named(tmp_path):
    _fake_sglang(tmp_path)
    rc, doc = _probe(env_path=str(tmp_path))
    assert rc == 1 and doc["compatible"] is False and doc["ok"] is False
    assert doc["sglang_version"] == "0.9.0" and doc["version_tested"] is False
    text = "\n".join(doc["mismatches"])
    assert "ATTENTION_BACKENDS['triton']: AssertionError: no 'triton' entry" in text
    assert "plugins.load_plugins: ModuleNotFoundError" in text
    assert "forward_extend(q, k, v, layer, forward_batch, save_kv_cache): AssertionError" in text
    assert (
        "ForwardMetadata fields: AssertionError: fields missing: ['custom_mask', 'mask_indptr', 'max_extend_len']"
        in text
    )
    assert "ForwardMode.TARGET_VERIFY" in text
    assert "extend_attention_fwd signature: AssertionError: first 13 parameters" in text
    assert doc["checks"]["TritonAttnBackend.init_cuda_graph_state(max_bs, max_num_tokens)"] is True
    assert doc["verify_route"] == "forward_extend", "no verify hook in this layout"


def test_a_service_python_without_sglang_is_blocked_not_passed(tmp_path):
    wrapper = tmp_path / "python-without-site"
    wrapper.write_text(f'#!/bin/sh\nexec {sys.executable} -S "$@"\n')  # -S: no site-packages
    wrapper.chmod(0o755)
    rc, doc = _probe("--service-python", str(wrapper))
    assert rc == 75 and doc["ok"] is False and doc["compatible"] is False
    assert "sglang is not installed" in doc["blocked"]


def test_a_missing_service_python_is_a_named_mismatch(tmp_path):
    rc, doc = _probe("--service-python", str(tmp_path / "bin" / "python"))
    assert rc == 1 and doc["compatible"] is False
    assert doc["mismatches"] == [f"service python {tmp_path / 'bin' / 'python'}: not found"]
