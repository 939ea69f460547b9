"""CPU tests of the DSA plugin route (kernels/sglang_verify_plugin/dsa_backend.py) on SGLang
0.5.23's real classes: registration under the name 'dsa' through the plugin's register(), the
factory choosing the bundled subclass or SGLang's own per the config's model_family, verify-only
routing, the fallbacks (each counted with its reason, per captured batch size and for eager
calls) and what each rank records in active.d / active.json.

The bundled kernel itself is replaced by a recorder here (no GPU; the GPU parity suite covers
its numbers), SGLang's decode impls by markers, and SGLang's forward_extend by a reduced one
that calls the decode impl as SGLang does for TARGET_VERIFY. DeepseekSparseAttnBackend's
__init__ needs a full model runner, so the factory tests replace it with one that sets the
attributes the route reads (device, token_to_kv_pool, dsa_index_kpool).

SGLang's real forward/forward_extend/forward_decode, capture metadata, capture mode and TBO
construction drive the route in test_dsa_route_sglang_paths.py."""

from __future__ import annotations

import json
import types

import pytest

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.sglang

BUNDLE = "d" * 64


@pytest.fixture
def dsa(sglang_ready, monkeypatch):
    from sglang.srt.layers.attention import attention_registry
    from sglang.srt.layers.attention.dsa_backend import DeepseekSparseAttnBackend

    from sglang_verify_plugin import dsa_backend

    saved = dict(attention_registry.ATTENTION_BACKENDS)
    dsa_backend.reset_process_routes()  # each test is a new service process
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
    dsa_backend.reset_process_routes()
    attention_registry.ATTENTION_BACKENDS.clear()
    attention_registry.ATTENTION_BACKENDS.update(saved)


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


def _batch(mode_name, bs=1):
    from sglang.srt.model_executor.forward_batch_info import ForwardMode

    return types.SimpleNamespace(forward_mode=getattr(ForwardMode, mode_name), batch_size=bs)


def _fake_kernel(monkeypatch, dsa, reason=None):
    import dsa_verify.api as api

    def fwd(q_all, kv, pt, sl, sm_scale, workspace=None, **kw):
        dsa.calls["bundled"].append((tuple(q_all.shape), tuple(kv.shape), tuple(sl.shape), sm_scale))
        return "bundled"

    monkeypatch.setattr(api, "dsa_verify_fwd", fwd)
    monkeypatch.setattr(api, "why_unsupported", lambda *a, **k: reason)
    monkeypatch.setattr(api, "workspace_numel_for", lambda *a, **k: 16)


def _verify(b, impl_args=None, bs=1):
    return b.forward_extend(None, None, None, None, _batch("TARGET_VERIFY", bs), impl_args=impl_args or _args())


def _eager(b):
    return b.dsa_stats()["eager"]


# ----------------------------------------------------------------------------- routing


def test_target_verify_goes_to_the_bundled_kernel(dsa, monkeypatch):
    _fake_kernel(monkeypatch, dsa)
    b = _backend(dsa)
    out = _verify(b, _args(kv="fp8"))
    assert out == "bundled" and dsa.calls["sglang"] == []
    assert dsa.calls["bundled"] == [((4, 8, 576), (128, 1, 656), (4,), 0.0625)]
    assert _eager(b) == {"routed": 1, "declined": 0, "reasons": {}}
    assert b._dsa_verify_marked is False  # the mark does not outlive the call


@pytest.mark.parametrize("mode", ["EXTEND", "DRAFT_EXTEND_V2", "DECODE", "IDLE"])
def test_other_modes_never_reach_the_bundled_kernel_and_are_not_counted(dsa, monkeypatch, mode):
    _fake_kernel(monkeypatch, dsa)
    b = _backend(dsa)
    out = b.forward_extend(None, None, None, None, _batch(mode), impl_args=_args())
    assert out == "sglang" and dsa.calls["bundled"] == []
    assert _eager(b) == {"routed": 0, "declined": 0, "reasons": {}}


def test_unsupported_call_falls_back_with_the_reason(dsa, monkeypatch):
    _fake_kernel(monkeypatch, dsa, reason="q_all: must be a CUDA tensor")
    b = _backend(dsa)
    assert _verify(b) == "sglang" and dsa.calls["bundled"] == []
    assert _eager(b) == {"routed": 0, "declined": 1, "reasons": {"q_all": 1}}


def test_real_validation_on_cpu_tensors_falls_back(dsa):
    b = _backend(dsa)
    assert _verify(b) == "sglang"
    assert _eager(b)["reasons"] == {"q_all": 1}  # dsa_verify.api: "q_all: must be a CUDA tensor"


def test_skip_softmax_and_kpool_fall_back(dsa, monkeypatch):
    _fake_kernel(monkeypatch, dsa)
    a = _args()
    a[5] = 0.5  # skip-softmax threshold: the bundled kernel has no skip-softmax
    b = _backend(dsa)
    assert _verify(b, a) == "sglang"
    b.dsa_index_kpool = 2
    assert _verify(b) == "sglang"
    assert _eager(b)["reasons"] == {"skip_softmax_threshold": 1, "index_kpool > 1": 1}
    assert dsa.calls["bundled"] == []


def test_a_kernel_error_disables_the_route_in_this_process_instead_of_failing_requests(dsa, monkeypatch):
    _fake_kernel(monkeypatch, dsa)
    import dsa_verify.api as api

    def boom(*a, **k):
        raise RuntimeError("dsa_verify launch failed: out of memory")

    monkeypatch.setattr(api, "dsa_verify_fwd", boom)
    b = _backend(dsa)
    assert _verify(b) == "sglang" and _verify(b) == "sglang"
    stats = b.dsa_stats()
    assert stats["kernel_error"].startswith("RuntimeError: dsa_verify launch failed")
    assert stats["eager"]["reasons"] == {"error": 1, "kernel disabled": 1}


def test_a_missing_prebuilt_library_declines_every_call_with_its_reason(dsa, monkeypatch):
    _fake_kernel(monkeypatch, dsa)
    b = _backend(dsa)

    def missing(device):
        raise ImportError("prebuilt DSA library missing: no build/sm_120a/record.json (phase 0 builds it)")

    assert b.dsa_preflight(missing).startswith("prebuilt DSA library missing")
    assert _verify(b) == "sglang" and dsa.calls["bundled"] == []
    assert list(_eager(b)["reasons"]) == [b.dsa_stats()["static_decline"]]


def test_captured_batch_sizes_record_which_kernel_each_graph_replays(dsa, monkeypatch):
    _fake_kernel(monkeypatch, dsa)
    b = _backend(dsa)
    monkeypatch.setattr(dsa.mod, "_capturing", lambda: True)
    assert _verify(b, _args(T=4), bs=1) == "bundled"
    skip = _args(T=16)
    skip[5] = 0.5
    assert _verify(b, skip, bs=4) == "sglang"
    monkeypatch.setattr(dsa.mod, "_capturing", lambda: False)
    assert _verify(b, _args(T=8), bs=2) == "bundled"
    stats = b.dsa_stats()
    assert stats["captured"] == {
        "1": {"kernel": "bundled", "bundled_calls": 1, "declined_calls": 0, "reasons": {}},
        "4": {"kernel": "sglang", "bundled_calls": 0, "declined_calls": 1, "reasons": {"skip_softmax_threshold": 1}},
    }
    assert stats["eager"] == {"routed": 1, "declined": 0, "reasons": {}}


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
    assert b._forward_fa3(q_rope, kv, 512, q_nope, pt, seqlens, None, None, 2, 0.0625, 0.0, 1) == "sglang-fa3"
    b._dsa_verify_marked = False
    assert b._forward_fa3(q_rope, kv, 512, q_nope, pt, seqlens, None, None, 1, 0.0625, 0.0, 1) == "sglang-fa3"
    assert _eager(b) == {"routed": 1, "declined": 1, "reasons": {"fa3_args": 1}}


# ----------------------------------------------------------------------------- registration


def _config(tmp_path, monkeypatch, **doc):
    path = tmp_path / "verify_backend.json"
    path.write_text(json.dumps({"verify_kernel": "bundled", "bundle_sha": BUNDLE, "defrag": False, **doc}))
    monkeypatch.setenv("ORCHESTRATOR_VERIFY_CONFIG", str(path))


def _runner(tp_rank=0, tp_size=1):
    return types.SimpleNamespace(
        tp_rank=tp_rank,
        tp_size=tp_size,
        pp_rank=0,
        dp_rank=None,
        is_draft_worker=False,
        device="cpu",
        model_config=types.SimpleNamespace(is_encoder_decoder=False),
    )


@pytest.fixture
def light_init(dsa, monkeypatch):
    """DeepseekSparseAttnBackend.__init__ replaced by one that keeps what the route reads."""

    def init(self, runner, *a, **k):
        self.device = runner.device
        self.dsa_index_kpool = 1
        self.token_to_kv_pool = types.SimpleNamespace(dtype=torch.uint8)
        self.built_with = runner

    monkeypatch.setattr(dsa.base, "__init__", init)
    return dsa


def _active(tmp_path):
    return json.loads((tmp_path / "active.json").read_text())


def test_register_installs_the_dsa_factory_beside_triton_and_unregister_restores_both(light_init):
    from sglang.srt.layers.attention.attention_registry import ATTENTION_BACKENDS

    import sglang_verify_plugin as plugin

    stock_dsa, stock_triton = ATTENTION_BACKENDS["dsa"], ATTENTION_BACKENDS["triton"]
    assert plugin.register() and plugin.register()  # idempotent: wraps SGLang's factory, not itself
    try:
        assert ATTENTION_BACKENDS["dsa"] is not stock_dsa
        assert ATTENTION_BACKENDS["dsa"]._orchestrator_stock_factory is stock_dsa
        assert ATTENTION_BACKENDS["triton"]._orchestrator_stock_factory is stock_triton
    finally:
        plugin.unregister()
    assert ATTENTION_BACKENDS["dsa"] is stock_dsa and ATTENTION_BACKENDS["triton"] is stock_triton


def test_a_dsa_cut_over_builds_the_subclass_and_records_the_dsa_route(light_init, tmp_path, monkeypatch):
    from sglang.srt.layers.attention.attention_registry import ATTENTION_BACKENDS

    import sglang_verify_plugin as plugin

    _config(tmp_path, monkeypatch, model_family="dsa")
    assert plugin.register()
    try:
        b = ATTENTION_BACKENDS["dsa"](_runner(0, 2))
        assert type(b) is light_init.mod.backend_class() and isinstance(b, light_init.base)
        active = _active(tmp_path)
        assert (active["verify_kernel"], active["route"], active["route_family"]) == ("bundled", "dsa", "dsa")
        assert active["ranks_missing"] == ["tp1"] and active["all_ranks_active"] is False
        rank = active["ranks"]["tp0"]
        assert rank["backends"]["target"]["verify"]["route"] == "dsa"
        assert rank["library"] == {"checked": False, "why": "device cpu is not CUDA: no library to load"}
    finally:
        plugin.unregister()


def test_a_dense_cut_over_leaves_the_dsa_backend_to_sglang_and_says_why(light_init, tmp_path, monkeypatch):
    """The bundle was cut over for dense MLA, but SGLang built the dsa backend (a DSA model):
    the record says stock, so the canary's kernel_active gate fails instead of passing silently."""
    from sglang_verify_plugin.config import load_config

    built = []
    _config(tmp_path, monkeypatch)  # no model_family: dense_mla
    factory = light_init.mod.make_dsa_factory(lambda r: built.append(r) or "sglang-dsa", load_config)
    assert factory(_runner()) == "sglang-dsa" and len(built) == 1
    active = _active(tmp_path)
    assert (active["verify_kernel"], active["route"], active["route_family"]) == ("stock", "stock", None)
    assert "model_family=dense_mla" in active["reason"] and active["all_ranks_active"] is False


def test_a_dsa_cut_over_leaves_the_triton_backend_to_sglang(dsa, tmp_path, monkeypatch):
    import sglang_verify_plugin as plugin
    from sglang_verify_plugin.config import load_config

    _config(tmp_path, monkeypatch, model_family="dsa")
    built = []
    factory = plugin.make_factory(lambda r: built.append(r) or "sglang-triton", load_config)
    assert factory(_runner()) == "sglang-triton" and len(built) == 1
    active = _active(tmp_path)
    assert active["route"] == "stock" and "model_family=dsa" in active["reason"]


def test_a_missing_dsa_library_makes_the_rank_record_say_declined(light_init, tmp_path, monkeypatch):
    from sglang.srt.layers.attention.attention_registry import ATTENTION_BACKENDS

    import sglang_verify_plugin as plugin

    def missing(device):
        raise ImportError("prebuilt DSA library missing: no record (phase 0 builds it)")

    monkeypatch.setattr(light_init.mod, "load_dsa_library", missing)
    _config(tmp_path, monkeypatch, model_family="dsa")
    assert plugin.register()
    try:
        ATTENTION_BACKENDS["dsa"](_runner())
        active = _active(tmp_path)
        assert (active["verify_kernel"], active["route"]) == ("stock", "declined")
        assert "prebuilt DSA library missing" in active["reason"]
        assert list(active["ranks_inactive"]) == ["tp0"] and active["all_ranks_active"] is False
    finally:
        plugin.unregister()


def test_the_kill_switch_wins_over_a_dsa_config(light_init, tmp_path, monkeypatch):
    from sglang.srt.layers.attention.attention_registry import ATTENTION_BACKENDS

    import sglang_verify_plugin as plugin

    _config(tmp_path, monkeypatch, model_family="dsa")
    monkeypatch.setenv("ORCHESTRATOR_VERIFY_DISABLE", "1")
    assert plugin.register()
    try:
        b = ATTENTION_BACKENDS["dsa"](_runner())
        assert type(b) is light_init.base
        assert _active(tmp_path)["route"] == "stock"
    finally:
        plugin.unregister()


# ----------------------------------------------------------------------------- per-rank records


def test_each_rank_records_its_own_dsa_routing_and_active_json_never_keeps_the_last_writer(
    light_init, tmp_path, monkeypatch
):
    """Two TP ranks: tp0's graphs and eager calls all on the bundled kernel, tp1 with one
    captured batch size on SGLang's kernel. tp0 writing last does not hide tp1's facts."""
    from sglang_verify_plugin import config

    _fake_kernel(monkeypatch, light_init)
    _config(tmp_path, monkeypatch, model_family="dsa")
    factory = light_init.mod.make_dsa_factory(lambda r: None)
    monkeypatch.setattr(light_init.mod, "_capturing", lambda: True)
    # tp1 (a separate process on a host: here one after the other, records reset in between)
    b1 = factory(_runner(1, 2))
    skip = _args(T=16)
    skip[5] = 0.5
    _verify(b1, _args(T=4), bs=1)
    _verify(b1, skip, bs=4)
    config.flush()
    config.reset_process_record()
    b0 = factory(_runner(0, 2))
    _verify(b0, _args(T=4), bs=1)
    _verify(b0, _args(T=16), bs=4)
    monkeypatch.setattr(light_init.mod, "_capturing", lambda: False)
    _verify(b0, _args(T=8), bs=2)
    config.flush()
    active = _active(tmp_path)
    assert sorted(active["ranks"]) == ["tp0", "tp1"] and active["ranks_missing"] == []
    assert active["route"] == "dsa" and active["route_family"] == "dsa"
    assert active["all_ranks_active"] is True  # both built the bundled route ...
    assert active["captured_not_bundled"] == [  # ... but tp1's bs-4 graph replays SGLang's kernel
        {"rank": "tp1", "bs": 4, "reasons": {"skip_softmax_threshold": 1}}
    ]
    assert active["captured_batch_sizes"] == {"tp0": [1, 4], "tp1": [1, 4]}
    assert active["eager_routed"] == 1 and active["eager_declined"] == 0


# ----------------------------------------------------------------------------- HF kernels

_SHIM = """
import os, sys
os.environ.setdefault("TRITON_INTERPRET", "1")
sys.path.insert(0, {here!r})
import torchvision_cpu_shim
torchvision_cpu_shim.install()
"""

_REGISTER = """
import sglang_verify_plugin, dsa_verify, dsa_verify.api
from sglang_verify_plugin import dsa_backend
from sglang.srt.layers.attention.attention_registry import ATTENTION_BACKENDS
from sglang.srt.layers.attention.dsa_backend import DeepseekSparseAttnBackend
assert sglang_verify_plugin.register()
assert ATTENTION_BACKENDS["dsa"].__name__ == "create_dsa_backend_with_bundled_verify"
assert issubclass(dsa_backend.backend_class(), DeepseekSparseAttnBackend)
"""

_HF = """
import kernels
from kernels import get_kernel
assert "site-packages" in kernels.__file__, kernels.__file__
"""


@pytest.mark.parametrize("hf_first", [True, False], ids=["hf-kernels-first", "plugin-first"])
def test_the_dsa_route_registers_beside_hugging_face_kernels_in_either_import_order(sglang_ready, hf_first):
    """SGLang imports HF ``kernels``; the dsa route (dsa_verify, the plugin's dsa_backend and
    SGLang's DeepseekSparseAttnBackend) must never shadow it, whichever is imported first."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    from tests.support.paths import KERNELS

    try:
        import kernels  # noqa: F401
    except ImportError as exc:
        pytest.skip(f"Hugging Face kernels not installed ({exc}): see tests/integration/requirements-sglang.txt")
    here = str(Path(__file__).resolve().parent)
    body = (_HF + _REGISTER) if hf_first else (_REGISTER + _HF)
    code = _SHIM.format(here=here) + body + "\nassert sys.modules['kernels'] is kernels\nprint('OK')\n"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(KERNELS.parent), str(KERNELS)])}
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env, cwd=str(KERNELS.parent)
    )
    assert proc.returncode == 0 and proc.stdout.strip().endswith("OK"), proc.stdout[-2000:] + proc.stderr[-3000:]
