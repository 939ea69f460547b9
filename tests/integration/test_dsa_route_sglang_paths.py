"""The DSA route (kernels/sglang_verify_plugin/dsa_backend.py) on SGLang 0.5.23's own code paths, on CPU.

What runs is SGLang's: ``AttentionBackend.forward`` (the mode dispatch), ``DeepseekSparseAttnBackend
.forward_extend`` / ``forward_decode`` (impl choice, q split and concat, top-k padding, fused
page table), ``init_cuda_graph_state`` and ``init_forward_metadata_out_graph`` (the static
CUDA-graph metadata the decode graph runner builds at capture and rewrites before each replay),
``model_capture_mode`` (the graph runner's capture flag), ``TboAttnBackend.init_new`` and
``ForwardMode``. The verify tensors the plugin hands to ``dsa_verify`` are therefore the ones
SGLang builds.

Stand-ins, each because SGLang needs a GPU or a model there:
- ``_sglang_state``: the attributes ``DeepseekSparseAttnBackend.__init__`` sets (it needs a
  ModelRunner, a KV pool and CUDA), with GLM-5's values (index_topk 2048, page 64, 4 draft
  tokens, fused top-k) and a CPU KV buffer of SGLang's layout ([slots + 64, 1, 576] bf16).
- the forward batch: the fields the graph runner's static batch carries (``_batch``).
- the bundled kernel: ``dsa_verify.reference.dsa_verify_ref`` behind the real argument check
  (``dsa_verify.api.validate`` with require_cuda off); the CUDA kernel's numbers are the GPU
  parity suite's.
- SGLang's GPU impls (flash_attn, FlashInfer, FlashMLA, trtllm): markers that record the call.
"""

from __future__ import annotations

import json
import types

import pytest

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.sglang

H, N, TOPK, SLOTS = 8, 4, 2048, 4096
SCALE = 0.0625


@pytest.fixture
def route(sglang_ready, monkeypatch):
    from sglang.srt.layers.attention import attention_registry
    from sglang.srt.layers.attention.dsa_backend import DeepseekSparseAttnBackend

    import dsa_verify.api as api
    from dsa_verify.reference import dsa_verify_ref
    from sglang_verify_plugin import dsa_backend

    saved = dict(attention_registry.ATTENTION_BACKENDS)
    dsa_backend.reset_process_routes()
    calls = {"bundled": [], "sglang": []}

    def kernel(q_all, kv, pt, sl, sm_scale, workspace=None, **kw):  # stand-in: the reference
        api.validate(q_all, kv, pt, sl, sm_scale, require_cuda=False)
        calls["bundled"].append({"q_all": q_all, "kv": kv, "pt": pt, "seq_lens": sl, "sm_scale": sm_scale})
        return dsa_verify_ref(q_all, kv, pt, sl, sm_scale)[0].to(torch.bfloat16)

    def why(q_all, kv, pt, sl, sm_scale, out=None, lse=None):
        try:
            api.validate(q_all, kv, pt, sl, sm_scale, out, lse, require_cuda=False)
        except ValueError as exc:
            return str(exc)
        return None

    monkeypatch.setattr(api, "dsa_verify_fwd", kernel)
    monkeypatch.setattr(api, "why_unsupported", why)
    monkeypatch.setattr(api, "workspace_numel_for", lambda *a, **k: 0)  # split plan needs the GPU's SM count

    def marker(name):
        def impl(self, *a, **k):
            calls["sglang"].append(name)
            return name

        return impl

    for name in (
        "_forward_fa3",
        "_forward_flashinfer_sparse_mla",
        "_forward_flashmla_kv",
        "_forward_flashmla_sparse",
        "_forward_trtllm",
    ):
        monkeypatch.setattr(DeepseekSparseAttnBackend, name, marker(name))
    yield types.SimpleNamespace(mod=dsa_backend, base=DeepseekSparseAttnBackend, calls=calls)
    dsa_backend.reset_process_routes()
    attention_registry.ATTENTION_BACKENDS.clear()
    attention_registry.ATTENTION_BACKENDS.update(saved)


def _sglang_state(b, impl="fa3", kv=None):
    """Stand-in for DeepseekSparseAttnBackend.__init__ (needs a ModelRunner and CUDA)."""
    from sglang.srt.model_executor.runner_backend_utils.breakable_cuda_graph.context import (
        is_in_breakable_cuda_graph,
    )
    from sglang.srt.model_executor.runner_backend_utils.tc_piecewise_cuda_graph import (
        is_in_tc_piecewise_cuda_graph,
    )
    from sglang.srt.utils.torch_memory_saver_adapter import TorchMemorySaverAdapter

    b.device = "cpu"
    b.physical_page_size = 64
    b.hisparse_coordinator = None
    b.speculative_num_draft_tokens = N
    b.dsa_index_kpool = 1
    b.dsa_index_topk = TOPK
    b.use_fused_topk = True
    b.use_mha = False
    b.device_sm_major = 9
    b.dsa_kv_cache_store_fp8 = False
    b.req_to_token = torch.zeros(8, SLOTS, dtype=torch.int32)
    b._memory_saver_adapter = TorchMemorySaverAdapter.create(enable=False)
    b.dsa_decode_impl = impl
    b.dsa_prefill_impl = "flashmla_sparse"
    b.enable_auto_select_prefill_impl = False
    b._multi_ctas_kv_counter_buffer = None
    b.dsa_topk_backend = types.SimpleNamespace(
        should_use_topk_v2=lambda: False, is_sgl_kernel=lambda: True, is_flashinfer=lambda: False
    )
    b._is_in_breakable_cuda_graph = is_in_breakable_cuda_graph
    b._is_in_tc_piecewise_cuda_graph = is_in_tc_piecewise_cuda_graph
    b._get_device_sm = lambda: 90
    b._is_blackwell = lambda: False
    b._arange_buf = torch.arange(16384, dtype=torch.int32)
    g = torch.Generator().manual_seed(0)
    buf = kv if kv is not None else (torch.randn(SLOTS + 64, 1, 576, generator=g) * 0.5).to(torch.bfloat16)
    b.token_to_kv_pool = types.SimpleNamespace(dtype=buf.dtype, get_key_buffer=lambda layer_id: buf)
    return b


def _backend(route, impl="fa3"):
    return _sglang_state(object.__new__(route.mod.backend_class()), impl)


def _layer():
    from sglang.srt.layers.radix_attention import RadixAttention

    return RadixAttention(H, 576, SCALE, 1, layer_id=0, v_head_dim=512)


def _batch(mode, prefix_lens):
    from sglang.srt.model_executor.forward_batch_info import ForwardMode

    seq = torch.tensor(prefix_lens, dtype=torch.int32)
    bs = len(prefix_lens)
    return types.SimpleNamespace(
        forward_mode=getattr(ForwardMode, mode),
        batch_size=bs,
        req_pool_indices=torch.arange(bs),
        seq_lens=seq,
        seq_lens_cpu=seq,
        spec_info=None,
        out_cache_loc=None,
    )


def _topk(prefix_lens, seed=1):
    """Fused top-k output: physical slots, -1 tail padding past each row's causal length."""
    g = torch.Generator().manual_seed(seed)
    rows = []
    for L in prefix_lens:
        for i in range(N):
            n = min(L + i + 1, TOPK)
            row = torch.full((TOPK,), -1, dtype=torch.int32)
            row[:n] = torch.randperm(SLOTS, generator=g)[:n].to(torch.int32) + 64
            rows.append(row)
    return torch.stack(rows)


def _q(T, seed=2):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(T, H * 512, generator=g)).to(torch.bfloat16), torch.randn(T, H, 64, generator=g).to(
        torch.bfloat16
    )


def _capture_metadata(b, fb, max_bs=4):
    b.init_cuda_graph_state(max_bs, max_bs * N)  # decode_cuda_graph_runner.py:429
    b.init_forward_metadata_out_graph(fb, in_capture=True)  # decode_cuda_graph_runner.py:1400
    return b.forward_metadata


def _forward(b, fb, q, q_rope, topk):
    """What RadixAttention.forward calls for a DSA layer (forward_mla.py:770: k/v saved, here None)."""
    return b.forward(q, None, None, _layer(), fb, q_rope=q_rope, k_rope=None, topk_indices=topk)


def _stats(b):
    return b.dsa_stats()


# ----------------------------------------------------------------------------- the verify seam


def _fp8_cache(bf16):
    """SGLang's fp8 DSA row layout as get_key_buffer returns it (uint8 store viewed as e4m3,
    memory_pool.py:4897): quantized by dsa_verify.layout.quantize_cache (stand-in for SGLang's
    CUDA quantizer, dsa_quant_k_cache.py)."""
    from dsa_verify.layout import quantize_cache

    return quantize_cache(bf16).view(torch.float8_e4m3fn)


@pytest.mark.parametrize("impl, kv", [("fa3", "bf16"), ("flashinfer_sparse_mla", "fp8"), ("flashmla_kv", "fp8")])
def test_target_verify_hands_sglangs_own_tensors_to_the_kernel(route, impl, kv):
    """T = bs x draft tokens rows, H heads per rank, q_all = [q_nope | q_rope], SGLang's KV
    buffer itself, the fused top-k table [T, index_topk] and the static graph seq_lens
    buffer min(L + i + 1, index_topk); sm_scale = layer.scaling; the output in the impl's layout."""
    prefix = [5, 3000]
    b = _backend(route, "fa3")
    if kv == "fp8":
        _sglang_state(b, "fa3", kv=_fp8_cache(b.token_to_kv_pool.get_key_buffer(0)))
        b.dsa_kv_cache_store_fp8 = True
    fb = _batch("TARGET_VERIFY", prefix)
    meta = _capture_metadata(b, fb)
    b.dsa_decode_impl = impl  # after the metadata: flashmla_kv's tile-scheduler metadata needs the GPU
    T = len(prefix) * N
    q, q_rope = _q(T)
    topk = _topk(prefix)
    out = _forward(b, fb, q, q_rope, topk)

    assert route.calls["sglang"] == []
    (c,) = route.calls["bundled"]
    assert c["q_all"].shape == (T, H, 576)
    assert torch.equal(c["q_all"], torch.cat([q.view(T, H, 512), q_rope], dim=-1))
    assert c["kv"].data_ptr() == b.token_to_kv_pool.get_key_buffer(0).data_ptr()
    assert (c["kv"].dtype, c["kv"].shape[-1]) == ((torch.float8_e4m3fn, 656) if kv == "fp8" else (torch.bfloat16, 576))
    assert c["pt"].data_ptr() == topk.data_ptr() and c["pt"].shape == (T, TOPK)
    assert c["seq_lens"].data_ptr() == meta.dsa_cache_seqlens_int32.data_ptr()  # the static buffer
    assert c["seq_lens"].tolist() == [6, 7, 8, 9, 2048, 2048, 2048, 2048]
    assert c["sm_scale"] == SCALE
    if impl == "flashmla_kv":
        assert out.shape == (T, 1, H, 512)  # FlashMLA's o before the caller's view
    else:
        assert out.shape == (T, H, 512)
    from dsa_verify.reference import dsa_verify_ref

    ref = dsa_verify_ref(c["q_all"], c["kv"], topk, c["seq_lens"], SCALE)[0]
    assert torch.allclose(out.reshape(T, H, 512).double(), ref, atol=2e-2, rtol=2e-2)
    assert _stats(b)["eager"] == {"routed": 1, "declined": 0, "reasons": {}}


def test_the_captured_call_reads_the_per_batch_size_seq_lens_buffer_sglang_refills(route):
    """Graph safety of seq_lens: the tensor the captured call reads is the one SGLang keeps
    for that batch size (decode_cuda_graph_metadata[bs], dsa_backend.py:1794) and refills in
    place before every replay (:1813-1829 -> copy_ at :1963). The refill itself runs a Triton
    CUDA kernel (seqlens_expand_triton, pad.py:369 asserts CUDA): replay is GPU-only."""
    b = _backend(route)
    fb = _batch("TARGET_VERIFY", [5, 3000])
    meta = _capture_metadata(b, fb)
    q, q_rope = _q(2 * N)
    _forward(b, fb, q, q_rope, _topk([5, 3000]))
    captured = route.calls["bundled"][0]["seq_lens"]
    assert b.decode_cuda_graph_metadata[2] is meta and captured is meta.dsa_cache_seqlens_int32
    # a second capture-time call for bs 2 does not rebuild it (the replay branch refills it)
    assert 2 in b.decode_cuda_graph_metadata


def test_padded_graph_rows_have_seq_len_one_and_all_minus_one_indices(route):
    """A graph captured for bs 4 replaying 3 requests: SGLang pads seq_lens with its fill value
    (get_cuda_graph_seq_len_fill_value, dsa_backend.py:4035) and the top-k rows with -1
    (_pad_topk_indices, :4014): the kernel reads no slot for them."""
    b = _backend(route)
    assert b.get_cuda_graph_seq_len_fill_value() == 1
    prefix = [7, 9, 1, 1]  # the 4th request is the runner's padding (seq_len fill 1)
    fb = _batch("TARGET_VERIFY", prefix)
    _capture_metadata(b, fb)
    topk = _topk(prefix[:3])  # the indexer emitted rows for the real requests only
    q, q_rope = _q(4 * N)
    _forward(b, fb, q, q_rope, topk)
    c = route.calls["bundled"][0]
    assert c["pt"].shape == (16, TOPK) and bool((c["pt"][12:] == -1).all())
    assert c["seq_lens"][12:].tolist() == [2, 3, 4, 5]


def test_flashmla_kv_over_a_bf16_store_stays_on_sglang(route):
    """SGLang quantizes the whole bf16 cache to fp8 for FlashMLA here (dsa_backend.py:3343-3344);
    the route declines rather than give different (unquantized) numbers."""
    b = _backend(route)
    fb = _batch("TARGET_VERIFY", [5])
    _capture_metadata(b, fb)
    b.dsa_decode_impl = "flashmla_kv"
    q, q_rope = _q(N)
    assert _forward(b, fb, q, q_rope, _topk([5])) == "_forward_flashmla_kv"
    assert _stats(b)["eager"]["reasons"] == {"flashmla_kv_bf16_store": 1}


def test_a_page_table_wider_than_index_topk_falls_back(route):
    b = _backend(route)
    b.dsa_index_topk = 1024  # the model's index_topk; the table below is 2048 wide
    fb = _batch("TARGET_VERIFY", [5])
    _capture_metadata(b, fb)
    q, q_rope = _q(N)
    assert _forward(b, fb, q, q_rope, _topk([5])) == "_forward_fa3"
    assert route.calls["bundled"] == [] and _stats(b)["eager"]["reasons"] == {"topk_width != index_topk": 1}


def test_a_verify_on_an_impl_the_route_does_not_override_is_counted_as_declined(route):
    """trtllm (sm_120 bf16 decode, overrides.py:726) returns before the KV save
    (dsa_backend.py:2210): SGLang's kernel runs and the rank's record says so."""
    b = _backend(route, "trtllm")
    fb = _batch("TARGET_VERIFY", [5])
    _capture_metadata(b, fb)
    q, q_rope = _q(N)
    assert _forward(b, fb, q, q_rope, _topk([5])) == "_forward_trtllm"
    assert _stats(b)["eager"] == {"routed": 0, "declined": 1, "reasons": {"impl trtllm": 1}}


# ----------------------------------------------------------------------------- other modes


def test_draft_extend_v2_takes_the_decode_impl_but_stays_on_sglang(route):
    """forward_extend picks dsa_decode_impl for DRAFT_EXTEND_V2 too (dsa_backend.py:2186-2193)."""
    b = _backend(route)
    fb = _batch("DRAFT_EXTEND_V2", [5])
    _capture_metadata(b, fb)
    q, q_rope = _q(N)
    assert _forward(b, fb, q, q_rope, _topk([5])) == "_forward_fa3"
    assert route.calls["bundled"] == [] and _stats(b)["eager"] == {"routed": 0, "declined": 0, "reasons": {}}


def test_decode_goes_through_forward_decode_and_stays_on_sglang(route):
    b = _backend(route)
    fb = _batch("DECODE", [5, 9])
    _capture_metadata(b, fb)
    q, q_rope = _q(2)
    topk = torch.full((2, TOPK), -1, dtype=torch.int32)
    assert _forward(b, fb, q, q_rope, topk) == "_forward_fa3"
    assert route.calls["bundled"] == [] and _stats(b)["eager"]["routed"] == 0


def test_prefill_extend_runs_sglangs_prefill_impl(route):
    b = _backend(route)
    fb = _batch("TARGET_VERIFY", [5])
    _capture_metadata(b, fb)  # any metadata: the prefill impl is a marker here
    from sglang.srt.model_executor.forward_batch_info import ForwardMode

    fb.forward_mode = ForwardMode.EXTEND
    q, q_rope = _q(N)
    assert _forward(b, fb, q, q_rope, _topk([5])) == "_forward_flashmla_sparse"
    assert route.calls["bundled"] == [] and _stats(b)["eager"]["routed"] == 0


def test_an_idle_batch_never_reaches_the_backend_impls(route):
    """DP attention's idle ranks: AttentionBackend.forward returns an empty output (base_attn_backend.py:332)."""
    b = _backend(route)
    fb = _batch("IDLE", [])
    q = torch.zeros(0, H * 512, dtype=torch.bfloat16)
    out = b.forward(q, None, None, _layer(), fb, q_rope=torch.zeros(0, H, 64), topk_indices=None)
    assert out.shape == (0, H * 512) and route.calls == {"bundled": [], "sglang": []}


# ----------------------------------------------------------------------------- CUDA-graph capture


def test_the_captures_warmup_runs_count_with_their_batch_size_not_as_eager_calls(route):
    """The graph runner captures inside model_capture_mode() (decode_cuda_graph_runner.py:599)
    and runs each shape twice eagerly first (full_cuda_graph_backend.py:162)."""
    from sglang.srt.model_executor.runner_utils.capture_mode import model_capture_mode

    b = _backend(route)
    fb = _batch("TARGET_VERIFY", [5, 6])
    _capture_metadata(b, fb)
    q, q_rope = _q(2 * N)
    with model_capture_mode():
        for _ in range(3):  # two warmups + the captured run
            _forward(b, fb, q, q_rope, _topk([5, 6]))
    _forward(b, fb, q, q_rope, _topk([5, 6]))  # served eagerly after capture
    s = _stats(b)
    assert s["captured"] == {"2": {"kernel": "bundled", "bundled_calls": 3, "declined_calls": 0, "reasons": {}}}
    assert s["eager"] == {"routed": 1, "declined": 0, "reasons": {}}


def test_workspaces_are_per_captured_shape_and_one_grow_only_buffer_for_eager_calls(route, monkeypatch):
    from sglang.srt.model_executor.runner_utils.capture_mode import model_capture_mode

    import dsa_verify.api as api

    monkeypatch.setattr(api, "workspace_numel_for", lambda q, kv, pt, **k: 100 * q.shape[0])
    seen = []
    kernel = api.dsa_verify_fwd
    monkeypatch.setattr(api, "dsa_verify_fwd", lambda *a, workspace=None, **k: seen.append(workspace) or kernel(*a))
    b = _backend(route)
    for prefix in ([5], [5, 6]):
        fb = _batch("TARGET_VERIFY", prefix)
        _capture_metadata(b, fb)
        q, q_rope = _q(len(prefix) * N)
        with model_capture_mode():
            _forward(b, fb, q, q_rope, _topk(prefix))
            _forward(b, fb, q, q_rope, _topk(prefix))
        _forward(b, fb, q, q_rope, _topk(prefix))
    cap1, cap1b, eager1, cap2, cap2b, eager2 = seen
    assert cap1 is cap1b and cap2 is cap2b and cap1 is not cap2  # one per captured T, kept
    assert (cap1.numel(), cap2.numel()) == (400, 800)
    assert eager1.numel() == 400 and eager2.numel() == 800 and eager1 is not cap1 and eager2 is not cap2
    assert b._dsa_verify_ws[("eager", None)] is eager2  # grown in place of the smaller one


# ----------------------------------------------------------------------------- factory: draft, TBO, ranks


def _config(tmp_path, monkeypatch):
    path = tmp_path / "verify_backend.json"
    path.write_text(
        json.dumps({"verify_kernel": "bundled", "bundle_sha": "d" * 64, "defrag": False, "model_family": "dsa"})
    )
    monkeypatch.setenv("ORCHESTRATOR_VERIFY_CONFIG", str(path))


def _runner(draft=False, tp_rank=0):
    return types.SimpleNamespace(
        tp_rank=tp_rank, tp_size=1, pp_rank=0, dp_rank=None, is_draft_worker=draft, device="cpu"
    )


@pytest.fixture
def factory(route, tmp_path, monkeypatch):
    """make_dsa_factory over SGLang's stock factory, with __init__ replaced by _sglang_state."""
    monkeypatch.setattr(route.base, "__init__", lambda self, runner, *a, **k: _sglang_state(self) and None)
    _config(tmp_path, monkeypatch)
    return route.mod.make_dsa_factory(lambda runner: _sglang_state(object.__new__(route.base)))


def test_the_draft_runners_backend_built_through_the_registry_stays_sglangs(route, factory, tmp_path):
    """SGLang builds the draft runner's attention backend through ATTENTION_BACKENDS as well
    (eagle_worker_v2.py:283 -> model_runner.py:1122 -> attention_backend_setup.py:283)."""
    draft = factory(_runner(draft=True))
    target = factory(_runner())
    assert type(draft) is route.base and type(target) is route.mod.backend_class()
    rank = json.loads((tmp_path / "active.json").read_text())["ranks"]["tp0"]
    assert rank["backends"]["draft"]["verify_kernel"] == "stock"
    assert "draft runner: only the target model's verify is routed" in rank["backends"]["draft"]["reason"]
    assert rank["backends"]["target"]["verify"]["route"] == "dsa"


def test_two_batch_overlaps_three_backends_share_one_rank_record(route, factory, tmp_path):
    """TboAttnBackend.init_new builds a primary and two children through the factory
    (tbo_backend.py:44-48); the micro-batches' verify calls all land in the rank's counters."""
    from sglang.srt.layers.attention.tbo_backend import TboAttnBackend

    from sglang_verify_plugin import config

    def build():
        b = factory(_runner())
        b.req_to_token_pool = b.kv_index_translator = None
        return b

    tbo = TboAttnBackend.init_new(build)
    assert len({id(c.dsa_route) for c in [tbo.primary, *tbo.children]}) == 1
    fb = _batch("TARGET_VERIFY", [5])
    q, q_rope = _q(N)
    for child in tbo.children:
        _capture_metadata(child, fb)
        _forward(child, fb, q, q_rope, _topk([5]))
    config.flush()
    rank = json.loads((tmp_path / "active.json").read_text())["ranks"]["tp0"]
    assert rank["backends"]["target"]["verify"]["eager"] == {"routed": 2, "declined": 0, "reasons": {}}
