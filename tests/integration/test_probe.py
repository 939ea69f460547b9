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
    assert doc["mismatches"] == [] and doc["compatible"] is True
    # No launch arguments: which backend the server would pick is unknown, so not ok (fail closed).
    assert doc["ok"] is False and doc["plugin_engages"] is False
    assert doc["serving_reasons"] == ["service launch arguments unknown"]
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


MODEL_CONFIGS = Path(__file__).resolve().parent / "model_configs"
SHIM = Path(__file__).resolve().parent / "with_torchvision_shim.py"


def _resolve(
    model: str, gpu: str, *flags: str, root: Path | None = None, probe_args: tuple[str, ...] = ()
) -> tuple[int, dict]:
    """The probe CLI, as on a host, with SGLang's platform facts of ``gpu`` (CPU machine)."""
    import os

    launch = ["--model-path", str(MODEL_CONFIGS / model), "--tp-size", "8", *flags]
    env = {**os.environ, "PYTHONPATH": str(KERNELS)}
    extra = ["--root", str(root)] if root else ["--launch-args-json", json.dumps(launch)]
    extra += list(probe_args)
    proc = subprocess.run(
        [sys.executable, str(SHIM), "cutover_agent.probe", "--json", "--emulate-gpu", gpu, *extra],
        cwd=KERNELS,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    lines = proc.stdout.strip().splitlines()
    assert lines, proc.stderr[-2000:]
    return proc.returncode, json.loads(lines[-1])


EAGLE = ("--speculative-algorithm", "EAGLE")


@pytest.mark.sglang
def test_deepseek_v3_on_hopper_gets_fa3_and_the_probe_names_the_flag_that_engages_the_plugin(sglang_ready):
    """SGLang 0.5.23 defaults MLA to fa3 on Hopper: the dense plugin would never run."""
    rc, doc = _resolve("deepseek-v3-like", "sm90", *EAGLE)
    s = doc["serving"]
    assert rc == 1 and doc["ok"] is False and doc["compatible"] is True and doc["plugin_engages"] is False
    assert (s["verify_backend"], s["page_size"], s["kv_cache_dtype_effective"]) == ("fa3", 1, "bfloat16")
    assert s["architectures"] == ["DeepseekV3ForCausalLM"] and s["attention_arch"] == "MLA"
    assert "target verify runs on the fa3 backend" in s["reasons"][0]
    assert doc["engage_flags"] == ["--attention-backend", "triton"] and s["engage_flags_verified"] is True


@pytest.mark.sglang
def test_deepseek_v3_with_the_triton_flag_engages(sglang_ready, tmp_path):
    launch = ["--model-path", str(MODEL_CONFIGS / "deepseek-v3-like"), *EAGLE, "--attention-backend", "triton"]
    (tmp_path / "service_launch_args.json").write_text(json.dumps(launch))
    rc, doc = _resolve("deepseek-v3-like", "sm90", root=tmp_path)
    assert rc == 0 and doc["ok"] is True and doc["plugin_engages"] is True, doc["serving_reasons"]
    assert doc["serving"]["launch_args_source"] == str(tmp_path / "service_launch_args.json")
    assert doc["serving"]["verify_backend"] == "triton"


@pytest.mark.sglang
def test_the_decode_backend_route_engages_only_with_the_decode_attention_mode(sglang_ready):
    rc, doc = _resolve("deepseek-v3-like", "sm90", *EAGLE, "--decode-attention-backend", "triton")
    assert rc == 1 and doc["serving"]["verify_backend"] == "fa3", "verify runs on the prefill backend"
    rc, doc = _resolve(
        "deepseek-v3-like",
        "sm90",
        *EAGLE,
        "--decode-attention-backend",
        "triton",
        "--speculative-attention-mode",
        "decode",
    )
    assert doc["serving"]["verify_backend"] == "triton" and doc["plugin_engages"] is True, doc["serving_reasons"]


@pytest.mark.sglang
def test_an_fp8_e4m3_kv_cache_engages_and_fp8_e5m2_names_the_dtype(sglang_ready):
    rc, doc = _resolve(
        "deepseek-v3-like", "sm90", *EAGLE, "--attention-backend", "triton", "--kv-cache-dtype", "fp8_e4m3"
    )
    assert rc == 0 and doc["plugin_engages"] is True, doc["serving_reasons"]
    assert doc["serving"]["kv_cache_dtype_effective"] == "fp8_e4m3"
    rc, doc = _resolve(
        "deepseek-v3-like", "sm90", *EAGLE, "--attention-backend", "triton", "--kv-cache-dtype", "fp8_e5m2"
    )
    assert rc == 1 and doc["plugin_engages"] is False
    assert doc["serving_reasons"] == ["kv cache dtype fp8_e5m2: the bundled kernel reads bf16 or fp8_e4m3 only"]
    assert doc["engage_flags"] == ["--kv-cache-dtype", "bfloat16"] and doc["serving"]["engage_flags_verified"] is True


@pytest.mark.sglang
def test_deepseek_v3_on_blackwell_workstation_gets_triton_by_default(sglang_ready):
    rc, doc = _resolve("deepseek-v3-like", "sm120", *EAGLE)
    assert rc == 0 and doc["plugin_engages"] is True and doc["serving"]["verify_backend"] == "triton"


@pytest.mark.sglang
@pytest.mark.parametrize("gpu,kv,verify", [("sm90", "bfloat16", "fa3"), ("sm120", "fp8_e4m3", "flashinfer_sparse_mla")])
def test_glm5_is_a_dsa_model_the_dense_plugin_cannot_serve(sglang_ready, gpu, kv, verify):
    """An inventory that says dense_mla for a GLM-5 host is refused (the dsa route: test_probe_dsa.py)."""
    dense = ("--model-family", "dense_mla")
    rc, doc = _resolve("glm-5-like", gpu, *EAGLE, probe_args=dense)
    s = doc["serving"]
    assert rc == 1 and doc["plugin_engages"] is False and doc["engage_flags"] == []
    assert (s["attention_backend"], s["page_size"], s["kv_cache_dtype_effective"]) == ("dsa", 64, kv)
    assert s["dsa_decode_backend"] == verify and s["index_topk"] == 2048
    assert "DSA model (GlmMoeDsaForCausalLM" in s["reasons"][0] and "cannot serve it" in s["reasons"][0]
    # Forcing --attention-backend triton does not make a DSA model dense: still refused, named.
    rc, doc = _resolve("glm-5-like", gpu, *EAGLE, "--attention-backend", "triton", probe_args=dense)
    assert rc == 1 and doc["plugin_engages"] is False and doc["engage_flags"] == []
    assert "DSA model (GlmMoeDsaForCausalLM" in doc["serving_reasons"][0]


@pytest.mark.sglang
def test_no_speculative_decoding_means_no_target_verify(sglang_ready):
    rc, doc = _resolve("deepseek-v3-like", "sm120")
    assert rc == 1 and doc["serving_reasons"] == ["no --speculative-algorithm: this server never runs target verify"]


def test_launch_args_of_the_running_server_are_read_from_proc(tmp_path):
    from cutover_agent.probe import running_launch_args

    (tmp_path / "123").mkdir()
    (tmp_path / "123" / "cmdline").write_bytes(
        b"\0".join(
            [
                b"/srv/venv/bin/python",
                b"-m",
                b"sglang.launch_server",
                b"--model-path",
                b"/m",
                b"--attention-backend",
                b"triton",
            ]
        )
        + b"\0"
    )
    (tmp_path / "7").mkdir()
    (tmp_path / "7" / "cmdline").write_bytes(b"bash\0")
    assert running_launch_args(str(tmp_path)) == (
        ["--model-path", "/m", "--attention-backend", "triton"],
        "command line of pid 123",
    )
    (tmp_path / "124").mkdir()
    (tmp_path / "124" / "cmdline").write_bytes(b"/usr/bin/sglang\0serve\0--model-path\0/other\0")
    args, why = running_launch_args(str(tmp_path))
    assert args is None and "2 SGLang servers" in why
