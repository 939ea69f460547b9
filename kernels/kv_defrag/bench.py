"""Benchmark (CUDA only): relocation vs copy bandwidth, planner scaling, verify-kernel gain.

All ratios are measured in one run on one device:

- copy bandwidth: ``b.copy_(a)`` on a contiguous buffer, ``2 * bytes / t`` (read + write);
- relocation bandwidth: the plan's copy steps on the stacked KV buffers,
  ``2 * bytes_moved / t`` (each moved byte read once and written once; staging traffic is
  extra cost, not credit); ``relocation_bw_ratio`` = relocation / copy;
- planner time vs pool size: churned pools of 1k..1M slots, wall time of ``plan_defrag``;
- verify kernel on the same requests and data, once with the fragmented ``kv_indices`` (before
  the plan) and once with the defragmented ones (after): ``gain_pct = (t_frag - t_defrag) /
  t_frag * 100``. Timings: median of CUDA-event runs, the two layouts interleaved.
"""

from __future__ import annotations

import statistics
import time

import numpy as np

from .executor import device_steps, run_copies
from .planner import plan_defrag
from .pool import make_kv_buffers
from .workload import ChurnConfig, simulate_churn


def _sync(device: str) -> None:
    import torch

    if str(device).startswith("cuda"):
        torch.cuda.synchronize()


def _time(fn, reps: int, warmup: int = 2, device: str = "cuda") -> float:
    """Median seconds of ``fn`` over ``reps`` runs: CUDA events on CUDA, wall clock elsewhere
    (CPU timing only serves the smoke test; the CLI bench requires CUDA)."""
    import torch

    for _ in range(warmup):
        fn()
    _sync(device)
    out = []
    for _ in range(reps):
        if str(device).startswith("cuda"):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            fn()
            b.record()
            b.synchronize()
            out.append(a.elapsed_time(b) / 1e3)
        else:
            t0 = time.perf_counter()
            fn()
            out.append(time.perf_counter() - t0)
    return statistics.median(out)


def copy_bandwidth(nbytes: int, reps: int = 10, device: str = "cuda") -> float:
    """Device copy bandwidth in bytes/s (read + write counted)."""
    import torch

    a = torch.empty(nbytes, dtype=torch.uint8, device=device)
    a.random_(0, 255)
    b = torch.empty_like(a)
    t = _time(lambda: b.copy_(a), reps, device=device)
    a = b = None
    return 2 * nbytes / t


def planner_scaling(sizes, min_run, seed: int) -> list[dict]:
    """Planner wall time (ms) for churned pools of the given slot counts."""
    rows = []
    for n in sizes:
        pool = simulate_churn(ChurnConfig(int(n), seed=seed))
        t0 = time.perf_counter()
        plan = plan_defrag(pool, min_run=min_run)
        ms = (time.perf_counter() - t0) * 1e3
        rows.append(
            {
                "slots": int(n),
                "live_tokens": plan.frag_before.live_tokens,
                "planner_ms": round(ms, 2),
                "tokens_moved": plan.tokens_moved,
                "runs_per_request_before": round(plan.frag_before.runs_per_request, 3),
                "runs_per_request_after": round(plan.frag_after.runs_per_request, 3),
            }
        )
    return rows


# --------------------------------------------------------------------------- verify kernels


def _verify_inputs(
    rtt: np.ndarray, seq_lens: np.ndarray, rows: np.ndarray, n_draft: int, heads: int, seed: int, dev: str = "cuda"
):
    """SGLang extend_attention_fwd arguments (page_size=1 target verify) except the buffers:
    q [T, H, 576], k_ext [T, 1, 576], v_ext [T, 1, 512] bf16 (T = bs * n_draft); o [T, H, 512];
    int32 qo_indptr / kv_indptr, int64 kv_indices (prefix slots from ``rtt``), uint8 FULL-layout
    causal mask with int64 mask_indptr; sm_scale = 192^-0.5 * 1.3689^2 (DeepSeek-V3)."""
    import torch

    g = torch.Generator(device=dev).manual_seed(seed)
    bs = rows.size
    lens = seq_lens[rows].astype(np.int64)
    t = bs * n_draft
    q = torch.randn((t, heads, 576), device=dev, dtype=torch.bfloat16, generator=g) * 0.5
    k_ext = torch.randn((t, 1, 576), device=dev, dtype=torch.bfloat16, generator=g) * 0.5
    v_ext = k_ext[..., :512].contiguous()
    o = torch.empty((t, heads, 512), device=dev, dtype=torch.bfloat16)
    qo_indptr = torch.arange(0, (bs + 1) * n_draft, n_draft, device=dev, dtype=torch.int32)
    kv_indptr = torch.zeros(bs + 1, device=dev, dtype=torch.int32)
    kv_indptr[1:] = torch.as_tensor(np.cumsum(lens), device=dev)
    idx = np.concatenate([rtt[r, : seq_lens[r]] for r in rows]).astype(np.int64)
    kv_indices = torch.as_tensor(idx, device=dev)
    cells = [n_draft * (int(L) + n_draft) for L in lens]
    mask_indptr = torch.zeros(bs + 1, device=dev, dtype=torch.int64)
    mask_indptr[1:] = torch.as_tensor(np.cumsum(cells), device=dev)
    parts = []
    tri = np.tril(np.ones((n_draft, n_draft), dtype=np.uint8))
    for L in lens:
        m = np.ones((n_draft, int(L) + n_draft), dtype=np.uint8)
        m[:, int(L) :] = tri
        parts.append(m.reshape(-1))
    mask = torch.as_tensor(np.concatenate(parts), device=dev)
    sm_scale = 192**-0.5 * 1.3689**2
    return dict(
        q=q,
        k_ext=k_ext,
        v_ext=v_ext,
        o=o,
        qo_indptr=qo_indptr,
        kv_indptr=kv_indptr,
        kv_indices=kv_indices,
        mask=mask,
        mask_indptr=mask_indptr,
        n_draft=n_draft,
        sm_scale=sm_scale,
        lens=lens,
    )


def torch_verify(a: dict, k_buffer) -> None:
    """Plain PyTorch reference of the same shape: gather the prefix rows by slot, bf16 matmuls,
    fp32 softmax; writes ``a["o"]``."""
    import torch

    n = a["n_draft"]
    kv = k_buffer.index_select(0, a["kv_indices"])[:, 0, :]  # [sum L, 576]; the layout-sensitive read
    heads = a["q"].shape[1]
    off = 0
    tri = torch.tril(torch.ones(n, n, dtype=torch.bool, device=kv.device))
    for b, L in enumerate(a["lens"].tolist()):
        q = a["q"][b * n : (b + 1) * n].reshape(n * heads, 576)
        k = torch.cat([kv[off : off + L], a["k_ext"][b * n : (b + 1) * n, 0]], dim=0)
        s = (q @ k.T).float() * a["sm_scale"]
        s[:, L:].masked_fill_(~tri.repeat_interleave(heads, dim=0), float("-inf"))
        p = torch.softmax(s, dim=-1).to(torch.bfloat16)
        a["o"][b * n : (b + 1) * n] = (p @ k[:, :512]).reshape(n, heads, 512)
        off += L


def _bundled_verify():
    try:
        from mla_verify import mla_verify_fwd  # noqa: PLC0415
    except Exception as e:  # noqa: BLE001 - report any import failure as the reason
        return None, f"mla_verify not importable: {type(e).__name__}: {e}"
    return mla_verify_fwd, None


def _sglang_verify():
    """SGLang's extend_attention_fwd (0.5.23 path, then the older one), or (None, why)."""
    import importlib

    reasons = []
    for mod in (
        "sglang.kernels.ops.attention.extend_attention",
        "sglang.srt.layers.attention.triton_ops.extend_attention",
    ):
        try:
            return importlib.import_module(mod).extend_attention_fwd, None
        except Exception as e:  # noqa: BLE001
            reasons.append(f"{mod}: {type(e).__name__}: {str(e)[:160]}")
    return None, "sglang extend_attention_fwd not importable: " + "; ".join(reasons)


def _call_extend_like(fn, a: dict, k_buffer) -> None:
    """Call with extend_attention_fwd's first 13 positional arguments; k_scale / v_scale are
    passed only where the signature has them (older sglang versions do not)."""
    import inspect

    params = inspect.signature(fn).parameters
    kw = {"sm_scale": a["sm_scale"]}
    if "k_scale" in params:
        kw.update(k_scale=1.0, v_scale=1.0)
    fn(
        a["q"],
        a["k_ext"],
        a["v_ext"],
        a["o"],
        k_buffer,
        k_buffer[..., :512],
        a["qo_indptr"],
        a["kv_indptr"],
        a["kv_indices"],
        a["mask"],
        True,
        a["mask_indptr"],
        a["n_draft"],
        **kw,
    )


def _gain(run_frag, run_defrag, reps: int, device: str) -> dict:
    """Interleaved medians of the two layouts and the gain in percent."""
    for _ in range(2):
        run_frag()
        run_defrag()
    _sync(device)
    tf, td = [], []
    for _ in range(reps):
        tf.append(_time(run_frag, 1, warmup=0, device=device))
        td.append(_time(run_defrag, 1, warmup=0, device=device))
    f, d = statistics.median(tf), statistics.median(td)
    return {"t_frag_us": round(f * 1e6, 2), "t_defrag_us": round(d * 1e6, 2), "gain_pct": round((f - d) / f * 100, 3)}


def verify_gain(
    pool,
    plan,
    after_rtt: np.ndarray,
    batch: int,
    n_draft: int,
    heads: int,
    reps: int,
    seed: int,
    use_bundled: bool = True,
    device: str = "cuda",
) -> dict:
    """Verify-kernel time on the fragmented vs defragmented layout of the same data (layer 0)."""
    import torch

    rows = pool.live_requests()
    rows = rows[np.argsort(-pool.seq_lens[rows], kind="stable")][:batch]
    rows = np.sort(rows)
    kb_frag = torch.zeros((pool.num_slots + 1, 1, 576), dtype=torch.bfloat16, device=device)
    live = torch.as_tensor(pool.live_slots(), device=device)
    kb_frag[live] = (
        torch.randn((live.numel(), 1, 576), device=device, generator=torch.Generator(device=device).manual_seed(seed))
        * 0.5
    ).to(torch.bfloat16)
    kb_defrag = torch.zeros_like(kb_frag)
    kb_defrag[torch.as_tensor(plan.remap, device=device)[live]] = kb_frag[live]
    a_frag = _verify_inputs(pool.req_to_token, pool.seq_lens, rows, n_draft, heads, seed, device)
    a_def = dict(a_frag)
    a_def["kv_indices"] = _verify_inputs(after_rtt, pool.seq_lens, rows, n_draft, heads, seed, device)["kv_indices"]
    a_def["o"] = torch.empty_like(a_frag["o"])
    out = {"batch": int(rows.size), "n_draft": n_draft, "heads": heads, "prefix_tokens": int(a_frag["lens"].sum())}
    impls = []
    fn, why = _bundled_verify() if use_bundled else (None, "bundled kernel not used (--verify torch)")
    if fn is not None:
        try:
            _call_extend_like(fn, a_frag, kb_frag)
            _sync(device)
            impls.append(("bundled", lambda a, kb: _call_extend_like(fn, a, kb)))
        except Exception as e:  # noqa: BLE001
            why = f"mla_verify.mla_verify_fwd failed: {type(e).__name__}: {e}"
    if not impls:
        out["bundled_fallback_reason"] = why
        impls.append(("torch-gather", torch_verify))
    sg, sg_why = _sglang_verify()
    if sg is not None:
        impls.append(("sglang_extend", lambda a, kb: _call_extend_like(sg, a, kb)))
    else:
        out["sglang_skipped"] = sg_why
    for name, f in impls:
        try:
            g = _gain(
                lambda: f(a_frag, kb_frag),
                lambda: f(a_def, kb_defrag),
                reps if name != "sglang_extend" else max(3, reps // 4),
                device,
            )
            f(a_frag, kb_frag)
            f(a_def, kb_defrag)
            _sync(device)
            g["max_abs_diff_frag_vs_defrag"] = float((a_frag["o"].float() - a_def["o"].float()).abs().max())
            out[name] = g
        except Exception as e:  # noqa: BLE001
            out[name] = {"error": f"{type(e).__name__}: {e}"}
    out["verify_impl"] = impls[0][0]
    return out


def run_bench(
    slots: int,
    layers: int,
    dtype_name: str,
    min_run: int | None,
    seed: int,
    backend: str,
    planner_sizes,
    batch: int,
    n_draft: int,
    heads: int,
    reps: int,
    log=lambda *_: None,
    use_bundled: bool = True,
    device: str = "cuda",
) -> dict:
    """The whole benchmark; returns the JSON document. The CLI runs it on CUDA only; ``device``
    "cpu" exists for the smoke test. A failing section is reported under ``errors`` (ok=false)
    and the others still run."""
    import torch

    from .executor import update_index

    errors: dict[str, str] = {}
    dtype = torch.bfloat16 if dtype_name == "bf16" else torch.uint8
    pool = simulate_churn(ChurnConfig(slots, seed=seed))
    t0 = time.perf_counter()
    plan = plan_defrag(pool, min_run=min_run)
    planner_ms = (time.perf_counter() - t0) * 1e3
    log(f"plan: {plan.tokens_moved} moves, {plan.copy_steps} steps, {planner_ms:.0f} ms")
    elem = 2 if dtype_name == "bf16" else 1
    moved_bytes = plan.bytes_moved(layers, elem)
    bw_copy = None
    reloc: dict[str, dict] = {}
    try:
        kv = make_kv_buffers(slots, layers, dtype, device)
        copy_bytes = int(min(max(moved_bytes, 1 << 24), 4 << 30))
        bw_copy = copy_bandwidth(copy_bytes, reps, device)
        log(f"copy bandwidth: {bw_copy / 1e9:.0f} GB/s over {copy_bytes >> 20} MiB")
        backends = [backend] if backend != "auto" else ["auto", "torch"]
        steps = device_steps(plan, kv.device)
        variants = [("rows", 8), ("rows", 16), ("rows", 32), ("segments", 64), ("segments", 128), ("segments", 256)]
        for be in backends:
            for kind, block_m in variants if be != "torch" else [("rows", 8)]:
                used = {}
                t = _time(
                    lambda: used.update(
                        zip(
                            ("backend", "launches", "note"),
                            run_copies(plan, kv, be, block_m=block_m, steps=steps, kernel_kind=kind),
                        )
                    ),
                    reps,
                    warmup=1,
                    device=device,
                )
                bw = 2 * moved_bytes / t
                name = used["backend"] + (f"_{kind}_block_m{block_m}" if used["backend"] == "triton" else "")
                reloc[name] = {
                    "seconds": round(t, 6),
                    "bw_gbs": round(bw / 1e9, 2),
                    "ratio_vs_copy": round(bw / bw_copy, 4),
                    "launches": used["launches"],
                    "note": used["note"],
                }
                log(f"relocation [{name}]: {bw / 1e9:.0f} GB/s = {bw / bw_copy:.2%} of copy")
                if used["backend"] != "triton":
                    break  # no Triton here (or it fell back): one torch measurement is enough
        kv = None  # free the pool before the next size
    except Exception as e:  # noqa: BLE001 - keep one JSON document; the error is the result
        errors["relocation"] = f"{type(e).__name__}: {e}"
        log(f"relocation failed: {errors['relocation']}")
    if device.startswith("cuda"):
        torch.cuda.empty_cache()
    vg: dict = {}
    try:
        after_rtt = pool.req_to_token.copy()
        update_index(plan, after_rtt, pool.seq_lens)
        vg = verify_gain(pool, plan, after_rtt, batch, n_draft, heads, max(reps, 10), seed, use_bundled, device)
        log(f"verify: {vg}")
    except Exception as e:  # noqa: BLE001
        errors["verify"] = f"{type(e).__name__}: {e}"
        log(f"verify failed: {errors['verify']}")
    scaling: list[dict] = []
    try:
        scaling = planner_scaling(planner_sizes, min_run, seed)
    except Exception as e:  # noqa: BLE001
        errors["planner_scaling"] = f"{type(e).__name__}: {e}"
    # the executor's default path: the fastest Triton block size if Triton ran, else torch
    tri = {k: v for k, v in reloc.items() if k.startswith("triton")}
    pick = tri or reloc
    best = max(pick, key=lambda k: pick[k]["ratio_vs_copy"]) if pick else None
    impl = vg.get("verify_impl")
    res = vg.get(impl, {}) if impl else {}
    gain = res.get("gain_pct")
    summary = {
        "gain_pct": gain,
        "verify_impl": impl,
        "t_frag_us": res.get("t_frag_us"),
        "t_defrag_us": res.get("t_defrag_us"),
        "sglang_gain_pct": vg.get("sglang_extend", {}).get("gain_pct"),
        "relocation_bw_ratio": reloc[best]["ratio_vs_copy"] if best else None,
        "relocation_backend": best,
        "relocation_bw_gbs": reloc[best]["bw_gbs"] if best else None,
        "copy_bw_gbs": round(bw_copy / 1e9, 2) if bw_copy else None,
        "tokens_moved": plan.tokens_moved,
        "bytes_moved": moved_bytes,
        "staged_tokens": plan.staged_tokens,
        "planner_ms": round(planner_ms, 2),
        "planner_ms_by_slots": {str(r["slots"]): r["planner_ms"] for r in scaling},
        "frag_before": plan.frag_before.as_dict(),
        "frag_after": plan.frag_after.as_dict(),
        "slots": slots,
        "layers": layers,
    }
    for k, v in vg.items():
        if isinstance(v, dict) and "error" in v:
            errors[f"verify.{k}"] = v["error"]
    ok = not errors and gain is not None and best is not None
    return {
        "ok": bool(ok),
        "tool": "kv_defrag",
        "mode": "bench",
        "summary": summary,
        "errors": errors,
        "relocation": reloc,
        "verify": vg,
        "planner_scaling": scaling,
        "config": {
            "slots": slots,
            "layers": layers,
            "dtype": dtype_name,
            "min_run": min_run,
            "seed": seed,
            "device": torch.cuda.get_device_name() if device.startswith("cuda") else device,
            "torch": torch.__version__,
        },
    }
