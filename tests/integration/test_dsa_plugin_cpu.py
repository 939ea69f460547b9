"""CPU tests of the DSA plugin route (kernels/sglang_verify_plugin/dsa_backend.py) on SGLang
0.5.23's real classes: registration under the name 'dsa', the subclass, verify-only routing,
and the fallbacks (each counted with its reason). The bundled kernel itself is replaced by a
recorder here (no GPU); the GPU parity suite covers its numbers."""

from __future__ import annotations

import types

import pytest

torch = pytest.importorskip("torch")


@pytest.fixture
def dsa(sglang_ready, monkeypatch):
    from sglang.srt.layers.attention import attention_registry
    from sglang.srt.layers.attention.dsa_backend import DeepseekSparseAttnBackend

    from sglang_verify_plugin import dsa_backend

    saved = attention_registry.ATTENTION_BACKENDS.get("dsa")
    dsa_backend.reset_route_stats()
    calls = {"sglang": [], "bundled": []}

    def sglang_impl(self, q_all, kv_cache, page_table_1, seq_lens, sm_scale, skip):
        calls["sglang"].append(q_all.shape)
        return "sglang"

    def sglang_fa3(self, *a):
        calls["sglang"].append("fa3")
        return "sglang-fa3"

    monkeypatch.setattr(DeepseekSparseAttnBackend, "_forward_flashinfer_sparse_mla", sglang_impl)
    monkeypatch.setattr(DeepseekSparseAttnBackend, "_forward_fa3", sglang_fa3)

    def extend(self, q, k, v, layer, forward_batch, *a, **kw):  # SGLang's forward_extend, reduced
        return self._forward_flashinfer_sparse_mla(*kw["impl_args"])

    monkeypatch.setattr(DeepseekSparseAttnBackend, "forward_extend", extend)
    yield types.SimpleNamespace(mod=dsa_backend, base=DeepseekSparseAttnBackend, calls=calls)
    if saved is not None:
        attention_registry.ATTENTION_BACKENDS["dsa"] = saved


def _backend(dsa):
    b = object.__new__(dsa.mod.backend_class())  # SGLang's __init__ needs a model runner
    b.dsa_index_kpool = 1
    return b


def _args(T=4, H=8, kv="bf16"):
    q = torch.zeros(T, H, 576, dtype=torch.bfloat16)
    cache = (
        torch.zeros(128, 1, 576, dtype=torch.bfloat16) if kv == "bf16" else torch.zeros(128, 1, 656, dtype=torch.uint8)
    )
    return [q, cache, torch.full((T, 2048), -1, dtype=torch.int32), torch.ones(T, dtype=torch.int32), 0.0625, None]


def _batch(mode_name):
    from sglang.srt.model_executor.forward_batch_info import ForwardMode

    return types.SimpleNamespace(forward_mode=getattr(ForwardMode, mode_name))


def _fake_kernel(monkeypatch, dsa, reason=None):
    import dsa_verify.api as api

    def fwd(q_all, kv, pt, sl, sm_scale, workspace=None, **kw):
        dsa.calls["bundled"].append((tuple(q_all.shape), tuple(kv.shape), tuple(sl.shape), sm_scale))
        return "bundled"

    monkeypatch.setattr(api, "dsa_verify_fwd", fwd)
    monkeypatch.setattr(api, "why_unsupported", lambda *a, **k: reason)
    monkeypatch.setattr(api, "workspace_numel_for", lambda *a, **k: 16)


def test_register_dsa_installs_the_subclass_under_the_name_dsa(dsa):
    from sglang.srt.layers.attention.attention_registry import ATTENTION_BACKENDS

    assert dsa.mod.register_dsa() is None
    assert ATTENTION_BACKENDS["dsa"] is dsa.mod.create_dsa_backend
    cls = dsa.mod.backend_class()
    assert issubclass(cls, dsa.base) and cls is not dsa.base
    assert isinstance(_backend(dsa), dsa.base)  # SGLang's isinstance checks accept it


def test_target_verify_goes_to_the_bundled_kernel(dsa, monkeypatch):
    _fake_kernel(monkeypatch, dsa)
    b = _backend(dsa)
    out = b.forward_extend(None, None, None, None, _batch("TARGET_VERIFY"), impl_args=_args(kv="fp8"))
    assert out == "bundled" and dsa.calls["sglang"] == []
    assert dsa.calls["bundled"] == [((4, 8, 576), (128, 1, 656), (4,), 0.0625)]
    assert dsa.mod.route_stats() == {"bundled": 1}
    assert b._dsa_verify_marked is False  # the mark does not outlive the call


@pytest.mark.parametrize("mode", ["EXTEND", "DRAFT_EXTEND_V2", "DECODE", "IDLE"])
def test_other_modes_never_reach_the_bundled_kernel(dsa, monkeypatch, mode):
    _fake_kernel(monkeypatch, dsa)
    out = _backend(dsa).forward_extend(None, None, None, None, _batch(mode), impl_args=_args())
    assert out == "sglang" and dsa.calls["bundled"] == [] and dsa.mod.route_stats() == {}


def test_unsupported_call_falls_back_with_the_reason(dsa, monkeypatch):
    _fake_kernel(monkeypatch, dsa, reason="q_all: must be a CUDA tensor")
    out = _backend(dsa).forward_extend(None, None, None, None, _batch("TARGET_VERIFY"), impl_args=_args())
    assert out == "sglang" and dsa.calls["bundled"] == []
    assert dsa.mod.route_stats() == {"fallback:q_all": 1}


def test_real_validation_on_cpu_tensors_falls_back(dsa):
    out = _backend(dsa).forward_extend(None, None, None, None, _batch("TARGET_VERIFY"), impl_args=_args())
    assert out == "sglang"
    assert dsa.mod.route_stats() == {"fallback:q_all": 1}  # "q_all: must be a CUDA tensor"


def test_skip_softmax_and_kpool_fall_back(dsa, monkeypatch):
    _fake_kernel(monkeypatch, dsa)
    a = _args()
    a[5] = 0.5  # skip-softmax threshold: the bundled kernel has no skip-softmax
    b = _backend(dsa)
    assert b.forward_extend(None, None, None, None, _batch("TARGET_VERIFY"), impl_args=a) == "sglang"
    b.dsa_index_kpool = 2
    assert b.forward_extend(None, None, None, None, _batch("TARGET_VERIFY"), impl_args=_args()) == "sglang"
    assert dsa.mod.route_stats() == {"fallback:skip_softmax_threshold": 1, "fallback:index_kpool": 1}


def test_kernel_error_falls_back_instead_of_failing_the_request(dsa, monkeypatch):
    _fake_kernel(monkeypatch, dsa)
    import dsa_verify.api as api

    def boom(*a, **k):
        raise RuntimeError("dsa_verify launch failed: out of memory")

    monkeypatch.setattr(api, "dsa_verify_fwd", boom)
    out = _backend(dsa).forward_extend(None, None, None, None, _batch("TARGET_VERIFY"), impl_args=_args())
    assert out == "sglang" and dsa.mod.route_stats() == {"fallback:error": 1}


def test_fa3_verify_concatenates_q_and_trims_padded_seqlens(dsa, monkeypatch):
    _fake_kernel(monkeypatch, dsa)
    b = _backend(dsa)
    b._dsa_verify_marked = True
    T, H = 3, 8
    q_nope, q_rope = torch.zeros(T, H, 512, dtype=torch.bfloat16), torch.zeros(T, H, 64, dtype=torch.bfloat16)
    kv = torch.zeros(64, 1, 576, dtype=torch.bfloat16)
    pt = torch.full((T, 2048), -1, dtype=torch.int32)
    seqlens = torch.ones(T + 2, dtype=torch.int32)  # graph metadata padding
    out = b._forward_fa3(q_rope, kv, 512, q_nope, pt, seqlens, None, None, 1, 0.0625, 0.0, 1)
    assert out == "bundled"
    assert dsa.calls["bundled"] == [((T, H, 576), (64, 1, 576), (T,), 0.0625)]
    b._dsa_verify_marked = False
    assert b._forward_fa3(q_rope, kv, 512, q_nope, pt, seqlens, None, None, 1, 0.0625, 0.0, 1) == "sglang-fa3"
