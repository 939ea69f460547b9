"""cutover_agent.probe tells which route a host needs (issue 14), with SGLang 0.5.23's own
resolution of the launch arguments and the model's config.json (CPU; GPU platform emulated):
GLM-5 (GlmMoeDsaForCausalLM, index_topk 2048) -> dsa, DeepSeek-V3 -> dense_mla; the inventory's
family is checked against it; the dsa route's engagement rules and SGLang surface."""

from __future__ import annotations

import pytest
from test_probe import EAGLE, _resolve

pytestmark = pytest.mark.sglang


@pytest.mark.parametrize("gpu,kv,verify", [("sm90", "bfloat16", "fa3"), ("sm120", "fp8_e4m3", "flashinfer_sparse_mla")])
@pytest.mark.parametrize("family", ["auto", "dsa"])
def test_glm5_needs_the_dsa_route_and_it_engages_on_sglangs_defaults(sglang_ready, gpu, kv, verify, family):
    rc, doc = _resolve("glm-5-like", gpu, *EAGLE, probe_args=("--model-family", family))
    s = doc["serving"]
    assert (doc["model_family"], doc["model_family_derived"], doc["route"]) == ("dsa", "dsa", "dsa")
    assert (s["attention_backend"], s["page_size"], s["kv_cache_dtype_effective"]) == ("dsa", 64, kv)
    assert s["dsa_decode_backend"] == verify
    assert doc["plugin_engages"] is True and doc["serving_reasons"] == [], doc["serving_reasons"]
    assert doc["compatible"] is True and doc["mismatches"] == [] and rc == 0
    # the dsa route's seam was checked on the real SGLang classes
    dsa_checks = [k for k in doc["checks"] if "DeepseekSparseAttnBackend" in k or "['dsa']" in k]
    assert len(dsa_checks) == 6 and all(doc["checks"][k] for k in dsa_checks)
    assert doc["library"]["loadable"] is None or doc["library"]["kernel"] == "dsa_verify"


def test_deepseek_v3_is_dense_and_a_dsa_inventory_entry_for_it_is_refused(sglang_ready):
    rc, doc = _resolve("deepseek-v3-like", "sm120", *EAGLE)
    assert (doc["model_family"], doc["route"], doc["plugin_engages"], rc) == ("dense_mla", "triton", True, 0)
    rc, doc = _resolve("deepseek-v3-like", "sm120", *EAGLE, probe_args=("--model-family", "dsa"))
    assert rc == 1 and doc["plugin_engages"] is False and doc["model_family_derived"] == "dense_mla"
    assert doc["serving_reasons"] == [
        "the inventory says model_family dsa, but SGLang resolves this model as dense_mla"
    ]


def test_glm5_with_a_kv_dtype_the_dsa_kernel_cannot_read_does_not_engage(sglang_ready):
    rc, doc = _resolve(
        "glm-5-like", "sm90", *EAGLE, "--kv-cache-dtype", "fp8_e5m2", probe_args=("--model-family", "dsa")
    )
    if not doc["serving"]["resolved"]:  # SGLang itself refuses e5m2 for DSA (overrides.py:541-544)
        assert "could not resolve" in doc["serving_reasons"][0] and doc["plugin_engages"] is False
        return
    assert rc == 1 and doc["plugin_engages"] is False
    assert any("kv cache dtype fp8_e5m2" in r for r in doc["serving_reasons"])


def test_glm5_without_speculative_decoding_never_runs_target_verify(sglang_ready):
    rc, doc = _resolve("glm-5-like", "sm120")
    assert rc == 1 and doc["model_family"] == "dsa"
    assert doc["serving_reasons"] == ["no --speculative-algorithm: this server never runs target verify"]


@pytest.mark.parametrize("model,family", [("glm-5-like", "dsa"), ("deepseek-v3-like", "dense_mla")])
def test_family_only_prints_the_derived_family(sglang_ready, model, family):
    rc, doc = _resolve(model, "sm120", *EAGLE, probe_args=("--family-only",))
    assert rc == 0 and doc["ok"] is True and doc["model_family"] == family
