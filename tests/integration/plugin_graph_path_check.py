"""GPU check: the bundled verify kernel through SGLang's OWN TritonAttnBackend CUDA-graph path.

Run on a CUDA machine with sglang 0.5.23 importable (``bash tests/device/plugin_check.sh graph``
sets that up on the H200)::

    python tests/integration/plugin_graph_path_check.py --json --out FILE

What it does, the way SGLang 0.5.23's decode CUDA-graph runner drives target verify:

- ONE MLA mock runner (SGLang's test kit) sized for ``max(batch_sizes)`` requests of the
  largest context, ONE backend from the registry (the plugin's ``BundledVerifyTritonBackend``),
  ``init_cuda_graph_state(max_bs, max_bs * n)`` once (graph buffers ``kv_indices`` of
  ``max_num_tokens x context_len``, the uint8 verify mask, the plugin's split-K workspace).
- For each batch size (largest first, one shared graph pool): static input buffers as the
  runner's (``seq_lens`` filled with ``get_cuda_graph_seq_len_fill_value()``,
  ``req_pool_indices`` 0, ``out_cache_loc`` 0, an all-ones bool custom mask),
  ``init_forward_metadata_out_graph(fb, in_capture=True)``, one warm-up forward, then
  ``init_forward_metadata_in_graph`` + ``forward_extend`` captured in ``torch.cuda.graph``.
- For each real prefix length, in the SAME runner: new KV data in the pool, shuffled slots in
  ``req_to_token``, new q/k/v, the FULL-layout mask; then (a) SGLang's own ``extend_attention_fwd``
  and the eager bundled call on an eager ForwardBatch (``init_forward_metadata``: exact-length
  ``kv_indices``), (b) the replay prep ``init_forward_metadata_out_graph(fb, in_capture=False)``
  on the static batch (in-place copies) and ``graph.replay()``.
- Checks: token-exact vs SGLang (argmax of ``o @ W``, the parity suite's seeded LM head; near
  ties excluded and counted), the replay bit-identical to a direct bundled call on the graph's
  own metadata views (same buffers, same split count: proves the replay ran the bundled kernel),
  and the time ratio replay / exact-length call (median of CUDA-event timings; the exact-length
  call captured in a graph of its own on the eager metadata, so launch overhead is alike; an
  eager-timed ratio is reported too). Bar: ratio <= 1.1. The plugin's ``stats()['captured']``
  must say ``bundled`` for every captured batch size.

``--dry-run`` (CPU, no CUDA graphs): the same batch building, capture-state metadata, in-place
rewrites and replay prep through SGLang's real metadata code (Triton's interpreter), with the
captured forward run directly instead of replayed and the bundled kernel replaced by a
REFERENCE STAND-IN (``mla_verify.reference``); it checks the rewriting logic, not the kernel.
Exit 0 pass, 1 a check failed, 75 blocked (no CUDA / no sglang).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import sys
import time
import traceback
from pathlib import Path
from types import SimpleNamespace
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
for p in (str(REPO / "kernels"), str(HERE)):
    if p not in sys.path:
        sys.path.insert(0, p)

EXIT_BLOCKED = 75
RATIO_BAR = 1.1
SM_SCALE = 0.1352  # DeepSeek-V3: 192**-0.5 * mscale**2


def parse_ints(text: str) -> list[int]:
    return [int(x) for x in str(text).split(",") if x.strip()]


def prefix_lens_for(bs: int, length: int, mixed: bool) -> tuple[int, ...]:
    """Per-request committed prefix lengths of a case: all ``length``, or (mixed) a spread
    from ``length`` down to ``length // (b + 1)`` (never below 1)."""
    if not mixed:
        return (length,) * bs
    return tuple(max(1, length // (b + 1)) for b in range(bs))


def slot_assignment(prefix_lens, n: int, n_slots: int, gen) -> list:
    """Shuffled distinct slots (slot 0 is SGLang's padding slot) per request: L + n each."""
    import torch

    need = sum(L + n for L in prefix_lens)
    if need > n_slots - 1:
        raise ValueError(f"pool too small: {need} slots needed, {n_slots - 1} usable")
    perm = torch.randperm(n_slots - 1, generator=gen)[:need] + 1
    out, at = [], 0
    for L in prefix_lens:
        out.append(perm[at : at + L + n])
        at += L + n
    return out


def setup(dry_run: bool) -> str | None:
    """Import torch/sglang, register the plugin (bundled); the reason it cannot, or None."""
    try:
        import torch
    except ImportError as exc:
        return f"torch not importable: {exc}"
    if dry_run:
        if not torch.cuda.is_available():
            os.environ.setdefault("TRITON_INTERPRET", "1")
        import torchvision_cpu_shim

        torchvision_cpu_shim.install()
    else:
        if not torch.cuda.is_available():
            return "no CUDA device"
        import sgl_kernel_import_shim

        sgl_kernel_import_shim.install()
    try:
        import sglang  # noqa: F401
        from sglang.test.kits.attention_unittest.attention_methods import mla_attention  # noqa: F401
    except Exception as exc:
        return f"sglang not importable: {type(exc).__name__}: {exc}"
    import sglang_verify_plugin as plugin
    from sglang_verify_plugin.config import VerifyConfig

    if not plugin.register(lambda: VerifyConfig("bundled", None, False, "plugin_graph_path_check")):
        return "could not register the plugin under 'triton'"
    return None


class ReferenceKernel:
    """REFERENCE STAND-IN for mla_verify in --dry-run only (CPU): mla_verify_ref into o."""

    def supports(self, *args, **kwargs) -> bool:
        return True

    def mla_verify_fwd(self, *args, workspace=None, **kwargs):
        from mla_verify.reference import mla_verify_ref

        o = args[3]
        kv_indptr, kv_indices = args[7], args[8]
        kv_indices = kv_indices[: int(kv_indptr[-1])]  # a graph buffer is longer than the prefix
        ref = mla_verify_ref(*args[:3], *args[4:8], kv_indices, *args[9:12], sm_scale=kwargs.get("sm_scale"))
        o.copy_(ref.to(o.dtype))
        return o


class ReferenceSGLangKernel:
    """REFERENCE STAND-IN for SGLang's extend_attention_fwd in --dry-run only (Triton's CPU
    interpreter does not run it faithfully): the same reference, on the arguments SGLang passes."""

    def __call__(self, *args, **kwargs):
        from mla_verify.reference import mla_verify_ref

        sm_scale = args[15] if len(args) > 15 else kwargs.get("sm_scale")
        ref = mla_verify_ref(*args[:3], *args[4:12], sm_scale=sm_scale)
        args[3].copy_(ref.to(args[3].dtype))


class GraphPathRig:
    """One runner + backend + graph state; per batch size a captured forward on static buffers."""

    def __init__(self, *, max_bs: int, max_len: int, n: int, heads: int, device: str, graphs: bool, seed: int):
        import torch
        from sglang.srt.layers.attention.attention_registry import ATTENTION_BACKENDS
        from sglang.srt.layers.radix_attention import RadixAttention
        from sglang.srt.model_executor.forward_batch_info import ForwardMode
        from sglang.test.kits.attention_unittest.attention_methods.mla_attention import (
            MLAAttentionCase,
            MockMLAModelRunner,
            TinyMLAModelConfig,
        )
        from sglang_verify_batch import publish_single_rank

        publish_single_rank()
        self.max_bs, self.n, self.heads, self.device, self.graphs = max_bs, n, heads, device, graphs
        self.ctx = max_len + n + 1
        self.gen = torch.Generator().manual_seed(seed)
        case = MLAAttentionCase(
            name="target_verify_graph",
            backend="triton",
            forward_mode=ForwardMode.TARGET_VERIFY,
            num_heads=heads,
            page_size=1,
            prefix_lens=(max_len,) * max_bs,
            extend_lens=(n,) * max_bs,
        )
        cfg = TinyMLAModelConfig(
            num_heads=heads, kv_lora_rank=512, qk_rope_head_dim=64, hidden_size=64, context_len=self.ctx
        )
        self.runner = MockMLAModelRunner(
            case=case,
            model_config=cfg,
            dtype=torch.bfloat16,
            device=device,
            max_context_len=self.ctx,
            kv_lora_rank=512,
            qk_rope_head_dim=64,
            runner_batch_size=max_bs,
        )
        self.backend = ATTENTION_BACKENDS["triton"](self.runner)
        self.layer = RadixAttention(
            num_heads=heads, head_dim=576, scaling=SM_SCALE, num_kv_heads=1, layer_id=0, v_head_dim=512
        )
        self.pool = self.runner.token_to_kv_pool
        self.r2t = self.runner.req_to_token_pool.req_to_token
        self.max_num_tokens = max_bs * n
        self.backend.init_cuda_graph_state(self.max_bs, self.max_num_tokens)
        self.fill = self.backend.get_cuda_graph_seq_len_fill_value()
        self.captured: dict[int, SimpleNamespace] = {}
        self.mempool = torch.cuda.graph_pool_handle() if graphs else None

    # -- batches ------------------------------------------------------------------
    def forward_batch(self, bs: int, seq_lens, req_pool_indices, out_cache_loc, custom_mask, seq_dtype):
        import torch
        from sglang.srt.model_executor.forward_batch_info import ForwardBatch, ForwardMode

        T = bs * self.n
        seq = torch.as_tensor(seq_lens, dtype=seq_dtype)
        fb = ForwardBatch(
            forward_mode=ForwardMode.TARGET_VERIFY,
            batch_size=bs,
            input_ids=torch.zeros(T, dtype=torch.int64, device=self.device),
            req_pool_indices=torch.as_tensor(req_pool_indices, dtype=torch.int64).to(self.device),
            seq_lens=seq.to(self.device),
            seq_lens_cpu=seq.clone(),
            seq_lens_sum=int(seq.sum()),
            out_cache_loc=torch.as_tensor(out_cache_loc, dtype=torch.int64).to(self.device),
            positions=torch.zeros(T, dtype=torch.int64, device=self.device),
        )
        self.runner.kv_index_translator.bind_own_plan(fb)
        fb.spec_info = SimpleNamespace(custom_mask=custom_mask, num_tokens_per_req=self.n)
        return fb

    def capture(self, bs: int) -> None:
        """What DecodeCudaGraphRunner.capture_one_batch_size does for TARGET_VERIFY at size bs."""
        import torch

        be, n, H = self.backend, self.n, self.heads
        T = bs * n
        mask = torch.ones((self.max_bs * self.fill + self.max_num_tokens) * n, dtype=torch.bool, device=self.device)
        fb = self.forward_batch(bs, [self.fill] * bs, [0] * bs, [0] * T, mask, torch.int64)
        st = SimpleNamespace(
            bs=bs,
            fb=fb,
            q=torch.zeros(T, H * 576, dtype=torch.bfloat16, device=self.device),
            k=torch.zeros(T, 1, 576, dtype=torch.bfloat16, device=self.device),
            v=torch.zeros(T, 1, 512, dtype=torch.bfloat16, device=self.device),
            graph=None,
            o=None,
        )
        be.init_forward_metadata_out_graph(fb, in_capture=True)
        if not self.graphs:
            self.captured[bs] = st
            return
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for _ in range(2):  # the runner's warm-up runs (run_once) before capture
                be.init_forward_metadata_in_graph(fb)
                be.forward_extend(st.q, st.k, st.v, self.layer, fb)
        torch.cuda.current_stream().wait_stream(stream)
        torch.cuda.synchronize()
        st.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(st.graph, pool=self.mempool):
            be.init_forward_metadata_in_graph(fb)
            st.o = be.forward_extend(st.q, st.k, st.v, self.layer, fb)
        torch.cuda.synchronize()
        self.captured[bs] = st

    def new_case(self, prefix_lens, visibility=None) -> SimpleNamespace:
        """Fresh KV data, slots, q/k/v and mask for one case (written into the runner's pools)."""
        import torch
        from sglang_verify_batch import full_layout_mask

        bs, n, H = len(prefix_lens), self.n, self.heads
        kbuf = self.pool.get_key_buffer(0)
        g = torch.Generator(device=self.device).manual_seed(int(torch.randint(1 << 30, (1,), generator=self.gen)))
        kbuf.copy_(torch.randn(kbuf.shape, generator=g, device=self.device, dtype=torch.float32).to(kbuf.dtype))
        slots = slot_assignment(prefix_lens, n, kbuf.shape[0], self.gen)
        self.r2t.zero_()
        out_cache_loc = []
        rows = list(range(1, bs + 1))  # row 0 is SGLang's padding row (padded graph lanes read it)
        for r, L, s in zip(rows, prefix_lens, slots):
            self.r2t[r, : L + n] = s.to(self.r2t.dtype).to(self.r2t.device)
            out_cache_loc += s[L:].tolist()
        T = bs * n
        return SimpleNamespace(
            prefix_lens=tuple(prefix_lens),
            req_pool_indices=rows,
            out_cache_loc=out_cache_loc,
            mask=full_layout_mask(prefix_lens, n, visibility, self.device),
            q=(torch.randn(T, H * 576, generator=g, device=self.device) * 0.5).to(torch.bfloat16),
            k=torch.randn(T, 1, 576, generator=g, device=self.device).to(torch.bfloat16),
        )

    def eager_batch(self, case):
        import torch

        bs = len(case.prefix_lens)
        return self.forward_batch(
            bs, case.prefix_lens, case.req_pool_indices, case.out_cache_loc, case.mask, torch.int32
        )

    def prepare_replay(self, case) -> SimpleNamespace:
        """The replay prep: in-place copies into the static batch, then out_graph(in_capture=False)."""
        import torch

        bs = len(case.prefix_lens)
        st = self.captured[bs]
        fb = st.fb
        st.q.copy_(case.q)
        st.k.copy_(case.k)
        st.v.copy_(case.k[..., :512])
        seq = torch.as_tensor(case.prefix_lens, dtype=fb.seq_lens.dtype)
        fb.seq_lens.copy_(seq.to(fb.seq_lens.device))
        fb.seq_lens_cpu.copy_(seq)
        fb.seq_lens_sum = int(seq.sum())
        fb.req_pool_indices.copy_(torch.as_tensor(case.req_pool_indices, dtype=fb.req_pool_indices.dtype))
        fb.out_cache_loc.copy_(torch.as_tensor(case.out_cache_loc, dtype=fb.out_cache_loc.dtype))
        fb.spec_info.custom_mask = case.mask
        self.backend.init_forward_metadata_out_graph(fb, in_capture=False)
        return st

    def replay(self, st):
        """graph.replay() (GPU), or the captured forward run directly on the replay state (dry run)."""
        if st.graph is not None:
            st.graph.replay()
            return st.o
        from sglang.srt.model_executor.forward_batch_info import ForwardMode

        be = self.backend
        be.forward_metadata = be._build_cuda_graph_forward_metadata(st.bs, ForwardMode.TARGET_VERIFY, st.fb.spec_info)
        return be.forward_extend(st.q, st.k, st.v, self.layer, st.fb)

    def direct_on_graph_metadata(self, st, out):
        """The bundled kernel called directly on the graph's metadata views (same split count)."""
        from sglang.srt.model_executor.forward_batch_info import ForwardMode

        be, H = self.backend, self.heads
        md = be._build_cuda_graph_forward_metadata(st.bs, ForwardMode.TARGET_VERIFY, st.fb.spec_info)
        mod = be.bundled_verify.kernel()
        extra = {"workspace": be.bundled_verify.workspace} if be.bundled_verify.workspace is not None else {}
        mod.mla_verify_fwd(
            st.q.view(-1, H, 576),
            st.k,
            st.v,
            out.view(-1, H, 512),
            self.pool.get_key_buffer(0),
            self.pool.get_value_buffer(0),
            md.qo_indptr,
            md.kv_indptr,
            md.kv_indices,
            md.custom_mask,
            True,
            md.mask_indptr,
            md.max_extend_len,
            k_scale=1.0,
            v_scale=1.0,
            sm_scale=SM_SCALE,
            logit_cap=0.0,
            **extra,
        )
        return out


def cuda_median_ms(fn, iters: int, warmup: int = 3) -> float:
    import torch

    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    evs = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(iters)]
    for a, b in evs:
        a.record()
        fn()
        b.record()
    torch.cuda.synchronize()
    return statistics.median(a.elapsed_time(b) for a, b in evs)


def _rel(a, b) -> float:
    import torch

    d = a.to(torch.float64) - b.to(torch.float64)
    return float(d.norm() / b.to(torch.float64).norm().clamp_min(1e-300))


def run_case(rig: GraphPathRig, prefix_lens, w, iters: int) -> dict:
    import torch

    from verify_tools.parity import token_check

    t0 = time.time()
    be, n, H = rig.backend, rig.n, rig.heads
    bs = len(prefix_lens)
    T = bs * n
    on_gpu = rig.graphs
    case = rig.new_case(prefix_lens)
    v = case.k[..., :512].contiguous()
    # (a) eager: SGLang's own kernel and the bundled call at the exact length (eager metadata).
    fb_e = rig.eager_batch(case)
    be.init_forward_metadata(fb_e)
    exact_numel = int(be.forward_metadata.kv_indices.numel())
    be.use_verify_shared_kv = False
    o_sglang = be.forward_extend(case.q, case.k, v, rig.layer, fb_e).view(T, H, 512).clone()
    sglang_ms = cuda_median_ms(lambda: be.forward_extend(case.q, case.k, v, rig.layer, fb_e), iters) if on_gpu else None
    be.use_verify_shared_kv = True
    calls0 = be.bundled_verify.bundled_calls
    o_eager = be.forward_extend(case.q, case.k, v, rig.layer, fb_e).view(T, H, 512).clone()
    eager_ran = be.bundled_verify.bundled_calls == calls0 + 1
    eager_ms = exact_graph_ms = None
    if on_gpu:
        eager_ms = cuda_median_ms(lambda: be.forward_extend(case.q, case.k, v, rig.layer, fb_e), iters)
        # The exact-length call in a graph of its own (eager metadata: kv_indices of the real length).
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            be.forward_extend(case.q, case.k, v, rig.layer, fb_e)
        torch.cuda.current_stream().wait_stream(stream)
        g_exact = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g_exact):
            o_exact_g = be.forward_extend(case.q, case.k, v, rig.layer, fb_e)
        g_exact.replay()
        torch.cuda.synchronize()
        exact_graph_equal_eager = bool(torch.equal(o_exact_g.view(T, H, 512), o_eager))
        exact_graph_ms = cuda_median_ms(g_exact.replay, iters)
        del g_exact
    # (b) SGLang's graph path: replay prep on the static batch, replay.
    st = rig.prepare_replay(case)
    o_graph = rig.replay(st)
    if on_gpu:
        torch.cuda.synchronize()
    o_graph = o_graph.view(T, H, 512).clone()
    graph_ms = cuda_median_ms(lambda: st.graph.replay(), iters) if on_gpu else None
    o_direct = rig.direct_on_graph_metadata(st, torch.empty_like(o_graph)).view(T, H, 512)
    replay_equal_direct = bool(torch.equal(o_graph, o_direct))
    tok = token_check(o_graph, o_sglang, w)
    tok_eager = token_check(o_eager, o_sglang, w)
    tok_ge = token_check(o_graph, o_eager, w)
    row: dict[str, Any] = {
        "B": bs,
        "n": n,
        "H": H,
        "prefix_lens": list(prefix_lens),
        "graph_kv_indices_numel": int(be.cuda_graph_kv_indices.numel()),
        "exact_kv_indices_numel": exact_numel,
        "finite": bool(torch.isfinite(o_graph).all()),
        "eager_ran_bundled": eager_ran,
        "replay_equal_direct_bundled_on_graph_metadata": replay_equal_direct,
        "rows": tok["rows"],
        "token_mismatches_graph_vs_sglang": tok["token_mismatches"],
        "near_ties_graph_vs_sglang": tok["near_ties"],
        "mismatches_in_near_ties_graph_vs_sglang": tok["mismatches_in_near_ties"],
        "token_mismatches_eager_vs_sglang": tok_eager["token_mismatches"],
        "token_mismatches_graph_vs_eager": tok_ge["token_mismatches"],
        "rel_err_graph_vs_sglang": _rel(o_graph, o_sglang),
        "rel_err_graph_vs_eager": _rel(o_graph, o_eager),
        "graph_equal_eager_bitwise": bool(torch.equal(o_graph, o_eager)),
    }
    if on_gpu:  # the split counts: the graph's launch (capture-time buffer) and what the device ran
        from mla_verify import api, tiles

        arch, sms = api.device_info(o_graph.device)
        cfg = tiles.DEFAULT_CONFIG[arch]
        rule = api.split_rule(bs, n, H, sms, cfg, tiles.ctas_per_sm(cfg, arch))
        s_grid = api.splits_for_total(rule, bs, row["graph_kv_indices_numel"])
        row["splits_graph_launch"] = s_grid
        row["splits_effective_replay"] = api.splits_for_total(rule, bs, sum(prefix_lens), s_grid)
        row["splits_exact_length"] = api.splits_for_total(rule, bs, exact_numel)
    if on_gpu:
        row.update(
            {
                "graph_replay_ms": graph_ms,
                "exact_length_graph_ms": exact_graph_ms,
                "exact_length_eager_ms": eager_ms,
                "sglang_eager_ms": sglang_ms,
                "ratio_replay_vs_exact_graph": graph_ms / exact_graph_ms,
                "ratio_replay_vs_exact_eager": graph_ms / eager_ms,
                "exact_graph_equal_eager": exact_graph_equal_eager,
            }
        )
    row["ok"] = (
        row["finite"]
        and eager_ran
        and replay_equal_direct
        and tok["token_mismatches"] == 0
        and (not on_gpu or row["ratio_replay_vs_exact_graph"] <= RATIO_BAR)
    )
    row["seconds"] = round(time.time() - t0, 2)
    return row


def _git_head() -> str | None:
    import subprocess

    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True, timeout=10)
    except Exception:
        return None
    return out.stdout.strip() or None


def run(args) -> dict:
    reason = setup(args.dry_run)
    if reason:
        return {"ok": False, "blocked": reason, "cases": [], "summary": {}}
    import sglang
    import torch

    from verify_tools.parity import lm_head

    device = "cpu" if args.dry_run else "cuda"
    sizes = sorted(set(parse_ints(args.batch_sizes)), reverse=True)  # largest first, as the runner
    lens = parse_ints(args.lens)
    t0 = time.time()
    rig = GraphPathRig(
        max_bs=max(sizes),
        max_len=max(lens),
        n=args.n,
        heads=args.heads,
        device=device,
        graphs=not args.dry_run,
        seed=args.seed,
    )
    be = rig.backend
    if args.dry_run:
        be.bundled_verify._kernel = ReferenceKernel()  # REFERENCE STAND-IN: CPU has no kernel
        be.extend_attention_fwd = ReferenceSGLangKernel()  # REFERENCE STAND-IN: see the class
        be.bundled_verify.static_decline = None
    setup_info = {
        "backend": type(be).__name__,
        "route": getattr(be, "bundled_verify_route", None),
        "static_decline": be.bundled_verify.static_decline,
        "library": be.bundled_verify.library,
        "context_len": rig.ctx,
        "max_bs": rig.max_bs,
        "max_num_tokens": rig.max_num_tokens,
        "graph_kv_indices_numel": int(be.cuda_graph_kv_indices.numel()),
        "workspace_numel": None if be.bundled_verify.workspace is None else int(be.bundled_verify.workspace.numel()),
        "verify_mask_numel": None if be._verify_mask is None else int(be._verify_mask.buffer.numel()),
        "seq_len_fill_value": rig.fill,
    }
    errors = []
    for bs in sizes:
        try:
            rig.capture(bs)
        except Exception as exc:
            errors.append(
                {"capture_bs": bs, "error": f"{type(exc).__name__}: {exc}", "tb": traceback.format_exc()[-1500:]}
            )
    captured_stats = be.bundled_verify.stats()["captured"]  # before any exact-length graph
    setup_info["setup_and_capture_s"] = round(time.time() - t0, 1)
    w = lm_head(device)
    rows = []
    deadline = time.time() + args.budget_s
    for L in lens:
        for bs in sorted(rig.captured):
            for mixed in (False, True) if args.mixed and bs > 1 else (False,):
                pl = prefix_lens_for(bs, L, mixed)
                if time.time() > deadline:
                    rows.append({"B": bs, "prefix_lens": list(pl), "ok": False, "error": "skipped: --budget-s"})
                    continue
                try:
                    rows.append(run_case(rig, pl, w, args.iters))
                except Exception as exc:
                    rows.append(
                        {
                            "B": bs,
                            "prefix_lens": list(pl),
                            "ok": False,
                            "error": f"{type(exc).__name__}: {exc}",
                            "traceback": traceback.format_exc()[-1500:],
                        }
                    )
                if not args.dry_run:
                    torch.cuda.empty_cache()
    all_bundled = bool(captured_stats) and all(
        str(bs) in captured_stats and captured_stats[str(bs)]["kernel"] == "bundled" for bs in sizes
    )
    ratios = [r["ratio_replay_vs_exact_graph"] for r in rows if "ratio_replay_vs_exact_graph" in r]
    ratios_e = [r["ratio_replay_vs_exact_eager"] for r in rows if "ratio_replay_vs_exact_eager" in r]
    failed = [r for r in rows if not r.get("ok")]
    summary = {
        "cases_total": len(rows),
        "cases_failed": len(failed),
        "capture_errors": len(errors),
        "max_ratio_replay_vs_exact_graph": max(ratios, default=None),
        "min_ratio_replay_vs_exact_graph": min(ratios, default=None),
        "max_ratio_replay_vs_exact_eager": max(ratios_e, default=None),
        "ratio_bar": RATIO_BAR,
        "token_mismatches_graph_vs_sglang": sum(r.get("token_mismatches_graph_vs_sglang", 0) for r in rows),
        "near_ties_graph_vs_sglang": sum(r.get("near_ties_graph_vs_sglang", 0) for r in rows),
        "mismatches_in_near_ties": sum(r.get("mismatches_in_near_ties_graph_vs_sglang", 0) for r in rows),
        "rows_compared": sum(r.get("rows", 0) for r in rows),
        "all_replays_equal_direct_bundled": all(r.get("replay_equal_direct_bundled_on_graph_metadata") for r in rows),
        "max_rel_err_graph_vs_sglang": max((r.get("rel_err_graph_vs_sglang", 0) for r in rows), default=None),
        "captured": captured_stats,
        "all_captured_bundled": all_bundled,
        # Also counts the exact-length reference graphs captured per case (same hook, eager metadata).
        "captured_after_reference_graphs": be.bundled_verify.stats()["captured"],
        "eager_routing": be.bundled_verify.stats()["eager"],
    }
    doc = {
        # A dry run captures nothing (no CUDA graphs on CPU): its captured stats are empty by design.
        "ok": bool(rows) and not failed and not errors and (all_bundled or bool(args.dry_run)),
        "dry_run": bool(args.dry_run),
        "device": torch.cuda.get_device_name(0) if not args.dry_run else "cpu (dry run, reference stand-in)",
        "torch": torch.__version__,
        "sglang_version": getattr(sglang, "__version__", None),
        # The checkout's HEAD as git reports it there; a device copy's .git can be stale, so the
        # script's own hash and the library's source_hash (setup.library) identify what ran.
        "git_head_reported": _git_head(),
        "script_sha256": hashlib.sha256(Path(__file__).read_bytes()).hexdigest(),
        "args": {k: getattr(args, k) for k in ("batch_sizes", "lens", "n", "heads", "iters", "mixed", "seed")},
        "setup": setup_info,
        "capture_errors": errors,
        "cases": rows,
        "summary": summary,
        "seconds": round(time.time() - t0, 1),
    }
    return doc


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch-sizes", default="1,2,4")
    ap.add_argument("--lens", default="512,4096,32768,131072", help="real committed prefix lengths")
    ap.add_argument("--n", type=int, default=4, help="draft tokens per request")
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--iters", type=int, default=30, help="timed replays / calls per measurement (median)")
    ap.add_argument("--mixed", action="store_true", help="also a case of mixed prefix lengths per batch size > 1")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--budget-s", type=float, default=240.0, help="skip (and report) cases past this")
    ap.add_argument("--dry-run", action="store_true", help="CPU: no graphs, reference stand-in kernel")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--out", help="also write the JSON document here")
    args = ap.parse_args(argv)
    doc = run(args)
    text = json.dumps(doc, indent=1, default=str)
    if args.out:
        Path(args.out).write_text(text + "\n")
    if args.json:
        print(text)
    else:
        print(f"graph path check: {'ok' if doc['ok'] else 'FAILED'} {doc.get('blocked', '')} {doc['summary']}")
    return EXIT_BLOCKED if doc.get("blocked") else (0 if doc["ok"] else 1)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
