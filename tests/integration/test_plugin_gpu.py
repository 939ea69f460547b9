"""On a CUDA machine: the plugin's verify path token-exact against SGLang's extend_attention_fwd.

Runs tests/integration/plugin_gpu_check.py's cases (SGLang-built metadata, parity cases with
uniform draft counts); skipped with the reason without CUDA or sglang.
"""

from __future__ import annotations

import pytest

pytestmark = [pytest.mark.gpu, pytest.mark.sglang]


@pytest.fixture(scope="module")
def gpu_doc():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device: the bundled kernel and SGLang's Triton kernels need one")
    import plugin_gpu_check

    doc = plugin_gpu_check.run(quick=True)
    if doc.get("blocked"):
        pytest.skip(doc["blocked"])
    return doc


def test_every_case_ran_the_bundled_kernel(gpu_doc):
    assert gpu_doc["cases"], "no case ran"
    assert [r["name"] for r in gpu_doc["cases"] if not r.get("ran_bundled_kernel")] == []


def test_plugin_outputs_are_token_exact_against_sglang_extend_attention(gpu_doc):
    """bf16 caches: against SGLang's kernel; fp8_e4m3 caches: against the oracle (SGLang's fp8 kernel rounds q and
    P to fp8, so its own tokens are the less exact ones; its agreement is in the JSON)."""

    def mismatches(r):
        key = "token_mismatches_plugin_vs_oracle" if r.get("kv_dtype") == "fp8_e4m3" else "token_mismatches_vs_sglang"
        return r.get(key, r.get("error"))

    bad = {r["name"]: mismatches(r) for r in gpu_doc["cases"] if mismatches(r) != 0}
    assert bad == {}
    assert any(r.get("kv_dtype") == "fp8_e4m3" for r in gpu_doc["cases"]), "no fp8 case ran"


def test_cuda_graph_replay_reproduces_the_eager_output(gpu_doc):
    graph = gpu_doc["summary"]["graph_cases_equal"]
    assert graph and all(graph)
