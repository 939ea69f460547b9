"""GPU check of the live defrag hook on real SGLang 0.5.23 structures (not yet run on a GPU).

CPU smoke (no GPU needed, small sizes): ``python -m sglang_verify_plugin.defrag_gpu_check --json
--device cpu --slots 40000 --layers 2``.

``python -m sglang_verify_plugin.defrag_gpu_check --json`` builds, on CUDA, SGLang's
``ReqToTokenPool``, ``MLATokenToKVPool`` (bf16, ``--layers`` x ``--slots``), a
``TokenToKVPoolAllocator`` and a ``RadixCache``; churns them with SGLang's own calls (admit,
batched decode allocation, insert finished requests into the tree, free duplicates, evict);
runs :class:`sglang_verify_plugin.defrag_hook.DefragHook` (Triton executor) until it stops
moving or ``--runs`` is reached; then checks what tests/integration/test_defrag_hook_cpu.py
checks on CPU: every live request's and cached prefix's bytes identical in every layer, the
tree matches the same keys, no slot with two owners, the free list the exact complement,
runs per request lower. Prints one JSON document; ``ok`` is the verdict. Without CUDA or
sglang: ``{"ok": false, "blocked": "<reason>"}`` and exit 75 (the tool contract, ``tool_contract``).
"""

from __future__ import annotations

import argparse
import sys
import time
from array import array
from collections import Counter

from tool_contract import blocked_doc, emit


def _world(sgl, torch, slots, layers, seed, max_ctx=8192, rows=512, dev="cuda"):
    import numpy as np

    rtp = sgl["ReqToTokenPool"](size=rows, max_context_len=max_ctx, device=dev, enable_memory_saver=False)
    pool = sgl["MLATokenToKVPool"](
        size=slots,
        page_size=1,
        dtype=torch.bfloat16,
        kv_lora_rank=512,
        qk_rope_head_dim=64,
        layer_num=layers,
        device=dev,
        enable_memory_saver=False,
    )
    alloc = sgl["TokenToKVPoolAllocator"](size=slots, dtype=torch.bfloat16, device=dev, kvcache=pool, need_sort=True)
    tree = sgl["RadixCache"](
        sgl["CacheInitParams"](disable=False, req_to_token_pool=rtp, token_to_kv_pool_allocator=alloc, page_size=1)
    )
    g = torch.Generator(device=dev).manual_seed(seed)
    for buf in pool.kv_buffer:
        u = buf.view(torch.uint8)
        u.copy_(torch.randint(0, 256, u.shape, generator=g, dtype=torch.uint8, device=dev))
    rng = np.random.default_rng(seed)
    live, keys = [], []

    def admit():
        row = rtp.alloc_rows(1)[0]
        toks = array("q", rng.integers(1, 50000, int(rng.integers(200, 4000))).tolist())
        kv = sgl["ReqKvInfo"](req_pool_idx=row)
        req = {"kv": kv, "tokens": toks, "node": None, "slots": []}
        if keys and rng.random() < 0.3:
            k = keys[int(rng.integers(len(keys)))]
            toks[: len(k) // 2] = k[: len(k) // 2]
            m = tree.match_prefix(sgl["MatchPrefixParams"](key=sgl["RadixKey"](toks)))
            pre = tree.path_device_indices(m.last_device_node)
            tree.inc_lock_ref(m.last_device_node)
            req["node"] = m.last_device_node
            req["slots"] = pre.tolist()
            kv.cache_protected_len = len(pre)
        live.append(req)

    def flush(req):
        s = req["slots"]
        if s:
            rtp.req_to_token[req["kv"].req_pool_idx, : len(s)] = torch.tensor(s, dtype=torch.int32, device=dev)
        req["kv"].kv_allocated_len = req["kv"].kv_committed_len = len(s)

    def finish(req, cache):
        flush(req)
        n = len(req["slots"])
        idx = torch.tensor(req["slots"], dtype=torch.int64, device=dev)
        if cache:
            res = tree.insert(sgl["InsertParams"](key=sgl["RadixKey"](req["tokens"][:n]), value=idx.clone()))
            alloc.free(idx[req["kv"].cache_protected_len : res.prefix_len])
            keys.append(array("q", req["tokens"][:n]))
        else:
            alloc.free(idx[req["kv"].cache_protected_len :])
        if req["node"] is not None:
            tree.dec_lock_ref(req["node"])
        rtp.free_rows([req["kv"].req_pool_idx])
        live.remove(req)

    allocated, step = 0, 0
    while allocated < 3 * slots:
        while len(live) < max(8, slots // 4000):  # ~50% of the pool live on average
            admit()
        need = [min(int(rng.integers(1, 5)), len(r["tokens"]) - len(r["slots"])) for r in live]
        if alloc.available_size() < sum(need) + 1:
            tree.evict(sgl["EvictParams"](num_tokens=sum(need) + slots // 20))
            if alloc.available_size() < sum(need) + 1:  # still full: finish the longest
                finish(max(live, key=lambda r: len(r["slots"])), cache=False)
                continue
        loc = alloc.alloc(sum(need)).tolist()  # one batch allocation: requests interleave
        allocated += len(loc)
        o = 0
        for r, k in zip(list(live), need):
            r["slots"].extend(loc[o : o + k])
            o += k
        for r in list(live):
            if len(r["slots"]) >= len(r["tokens"]) or rng.random() < 0.002:
                finish(r, cache=rng.random() < 0.7)
        step += 1
    for r in live:
        flush(r)
    # Load drops: evict cached prefixes until about a third of the pool is free. The free space
    # is then scattered in extents of a few slots (no request fits one whole); the hook's
    # rounds split gaps over several extents, see docs/kernels/kv-defrag-results.md.
    short = slots // 3 - alloc.available_size()
    if short > 0:
        tree.evict(sgl["EvictParams"](num_tokens=short))
    return rtp, pool, alloc, tree, live, keys


def _load(dev: str):
    """(torch, sgl names) or a blocked document (no torch / CUDA / sglang here)."""
    try:
        import torch
    except ImportError as exc:
        return None, blocked_doc(f"torch not importable: {exc}")
    if dev == "cuda" and not torch.cuda.is_available():
        return None, blocked_doc("CUDA is not available on this host")
    if dev == "cpu":  # smoke only: SGLang's CPU import path needs what tests/integration sets up
        import os
        from pathlib import Path

        os.environ.setdefault("TRITON_INTERPRET", "1")
        shim_dir = Path(__file__).resolve().parents[2] / "tests" / "integration"
        if shim_dir.is_dir() and str(shim_dir) not in sys.path:
            sys.path.insert(0, str(shim_dir))
        try:
            import setproctitle  # noqa: F401
        except ImportError:
            import types

            sys.modules["setproctitle"] = types.ModuleType("setproctitle")
        try:
            import torchvision_cpu_shim

            torchvision_cpu_shim.install()
        except ImportError:
            pass
    try:
        from sglang.srt.managers.schedule_batch import ReqKvInfo
        from sglang.srt.mem_cache.allocator.token import TokenToKVPoolAllocator
        from sglang.srt.mem_cache.base_prefix_cache import EvictParams, InsertParams, MatchPrefixParams
        from sglang.srt.mem_cache.cache_init_params import CacheInitParams
        from sglang.srt.mem_cache.memory_pool import MLATokenToKVPool, ReqToTokenPool
        from sglang.srt.mem_cache.radix_cache import RadixCache, RadixKey
    except Exception as exc:  # noqa: BLE001
        return None, blocked_doc(f"sglang 0.5.23 not importable: {type(exc).__name__}: {exc}")
    # named explicitly (a dict(locals()) lost them once to an unused-import autofix)
    sgl = {
        "ReqKvInfo": ReqKvInfo,
        "TokenToKVPoolAllocator": TokenToKVPoolAllocator,
        "EvictParams": EvictParams,
        "InsertParams": InsertParams,
        "MatchPrefixParams": MatchPrefixParams,
        "CacheInitParams": CacheInitParams,
        "MLATokenToKVPool": MLATokenToKVPool,
        "ReqToTokenPool": ReqToTokenPool,
        "RadixCache": RadixCache,
        "RadixKey": RadixKey,
    }
    return torch, sgl


def run(args) -> dict:
    dev = args.device
    torch, sgl = _load(dev)
    if torch is None:
        return sgl
    MatchPrefixParams, RadixKey = sgl["MatchPrefixParams"], sgl["RadixKey"]
    from sglang_verify_plugin.defrag_hook import DefragHook, DefragSettings, Target

    t0 = time.perf_counter()
    rtp, pool, alloc, tree, live, keys = _world(sgl, torch, args.slots, args.layers, args.seed, dev=dev)
    build_s = time.perf_counter() - t0

    def rows():
        return [rtp.req_to_token[r["kv"].req_pool_idx, : r["kv"].kv_allocated_len].long().clone() for r in live]

    def paths():
        out = []
        for k in keys:
            m = tree.match_prefix(MatchPrefixParams(key=RadixKey(k)))
            out.append((m.device_prefix_len, tree.path_device_indices(m.last_device_node).clone()))
        return out

    def runs_per_req(rs):
        return sum(1 + int((v[1:] != v[:-1] + 1).sum().item()) for v in rs if len(v)) / max(1, len(rs))

    rows0, paths0 = rows(), paths()
    kv0 = [b.clone() for b in pool.kv_buffer]
    rpr0 = runs_per_req(rows0)
    free0 = alloc.available_size()
    hook = DefragHook(
        settings=DefragSettings(
            interval_steps=1,
            min_runs_per_row=1.0,
            min_live_tokens=0,
            max_tokens_per_run=args.max_tokens_per_run,
            max_rounds_per_run=args.max_rounds_per_run,
            backend="auto",
            stall_budget_ms=0,  # this check is about data and indices, not time
        ),
        target=Target(rtp, alloc, tree, [pool], owners=lambda: [r["kv"] for r in live]),
    )
    results = []
    t1 = time.perf_counter()
    for _ in range(args.runs):
        res = hook.step()
        results.append(res)
        if res != "ran":
            break
    if dev == "cuda":
        torch.cuda.synchronize()
    hook_s = time.perf_counter() - t1
    errors = []
    rows1, paths1 = rows(), paths()
    u8 = lambda t: t.contiguous().view(torch.uint8)  # noqa: E731
    lost = 0  # row positions (live requests and cached prefixes) whose bytes differ in any layer

    def lost_in(old, new):
        if old.shape != new.shape:
            return max(len(old), len(new))
        if len(old) == 0:
            return 0
        bad = torch.zeros(len(old), dtype=torch.bool, device=old.device)
        for l0, l1 in zip(kv0, pool.kv_buffer):
            bad |= (u8(l1[new]) != u8(l0[old])).reshape(len(old), -1).any(dim=1)
        return int(bad.sum().item())

    for old, new in zip(rows0, rows1):
        lost += lost_in(old, new)
    for (p0, old), (p1, new) in zip(paths0, paths1):
        if p0 != p1:
            errors.append("match_prefix length changed")
        lost += lost_in(old, new)
    old_all = torch.cat(rows0 + [o for _, o in paths0])
    new_all = torch.cat(rows1 + [n for _, n in paths1])
    pairs = torch.unique(torch.stack([old_all, new_all]), dim=1)
    if torch.unique(pairs[0]).numel() != pairs.shape[1] or torch.unique(pairs[1]).numel() != pairs.shape[1]:
        errors.append("a slot has two owners (remap not a bijection)")
    free = alloc.get_all_free_pages()
    from kv_defrag.ragged import tree_nodes_with_slots

    live_slots = torch.unique(torch.cat(rows1 + [n.value for n in tree_nodes_with_slots(tree)]))
    if (
        torch.unique(free).numel() != free.numel()
        or torch.isin(free, live_slots).any()
        or live_slots.numel() + free.numel() != args.slots
    ):
        errors.append("free list is not the exact complement of the live slots")
    rpr1 = runs_per_req(rows1)
    summary = {
        "slots": args.slots,
        "layers": args.layers,
        "live_requests": len(live),
        "cached_keys": len(keys),
        "free_fraction_before": round(int(free0) / args.slots, 4),
        "hook_results": results,
        "runs": hook.runs,
        "tokens_moved": hook.tokens_moved,
        "bytes_moved": hook.bytes_moved,
        "skips": dict(hook.skips),
        "disabled": hook.disabled,
        "last_skip_detail": hook.last_skip_detail,
        "last_run": hook.last_run,
        "runs_per_request_before": rpr0,
        "runs_per_request_after": rpr1,
        "lost_tokens": lost,
        "errors": errors,
        "build_s": round(build_s, 3),
        "hook_s": round(hook_s, 3),
        "rounds": hook.rounds,
        "device": torch.cuda.get_device_name() if dev == "cuda" else "cpu (smoke)",
    }
    consistent = not errors
    ok = lost == 0 and consistent and hook.disabled is None and hook.runs >= 1 and hook.tokens_moved > 0 and rpr1 < rpr0
    return {
        "ok": ok,
        "tokens_moved": hook.tokens_moved,
        "runs_per_request_before": round(rpr0, 3),
        "runs_per_request_after": round(rpr1, 3),
        "lost_tokens": lost,
        "consistent": consistent,
        "seconds": round(time.perf_counter() - t0, 3),
        "hook_seconds": round(hook_s, 3),
        "device": summary["device"],
        "summary": summary,
    }


def _pct(xs) -> dict:
    import numpy as np

    if not len(xs):
        return {"n": 0}
    a = np.asarray(xs, dtype=np.float64)
    return {
        "n": int(a.size),
        "p50": round(float(np.percentile(a, 50)), 3),
        "p99": round(float(np.percentile(a, 99)), 3),
        "max": round(float(a.max()), 3),
        "mean": round(float(a.mean()), 3),
    }


_STALL_KNOBS = (
    "max_tokens_per_run",
    "max_rounds_per_run",
    "max_attempts_per_run",
    "interval_steps",
    "continue_interval_steps",
    "min_runs_per_row",
)


def _stall_settings(args):
    """The hook's defaults (what a service runs with), overridden only where the command line says."""
    from sglang_verify_plugin.defrag_hook import DefragSettings

    given = {k: getattr(args, k) for k in _STALL_KNOBS if getattr(args, k, None) is not None}
    # enforcement off: the benchmark measures the hook's stall itself (what the enforced
    # budget would have done is reported as enforced_disable_at_try)
    return DefragSettings.from_mapping({**given, "backend": "auto", "stall_budget_ms": 0})


def _stall_world(sgl, torch, args, dev, with_hook: bool) -> dict:
    """Build the churned world, then run ``args.steps`` scheduler steps on it, each as SGLang's
    event loop orders them: finished requests leave (radix insert, duplicate slots freed, lock
    released, row freed), ``get_next_batch_to_run`` (where the hook runs, before admission),
    admission (prefix match + lock, prompt allocated), one decode slot per running request (one
    batched ``alloc``: requests interleave), the forward's KV writes into every layer, device
    synchronised. Each slot's first two int32 words hold (token id, position); at the end every
    live request and cached prefix is read back through today's indices."""
    import numpy as np

    from sglang_verify_plugin.defrag_hook import DefragHook, Target

    ReqKvInfo, RadixKey = sgl["ReqKvInfo"], sgl["RadixKey"]
    InsertParams, MatchPrefixParams, EvictParams = sgl["InsertParams"], sgl["MatchPrefixParams"], sgl["EvictParams"]
    t0 = time.perf_counter()
    rtp, pool, alloc, tree, live0, keys = _world(sgl, torch, args.slots, args.layers, args.seed, dev=dev)
    build_s = time.perf_counter() - t0
    rtt = rtp.req_to_token
    words = [b.view(torch.int32) for b in pool.kv_buffer]  # [slots + 1, 1, 288] int32 per layer
    rng = np.random.default_rng(args.seed + 1)

    def write(slots_t, toks, pos):  # the forward's KV write, every layer
        tp = torch.as_tensor(np.stack([toks, pos], axis=1).astype(np.int32), device=dev)
        for w in words:
            w[slots_t, 0, 0:2] = tp

    live = []
    for r in live0:
        n = r["kv"].kv_allocated_len
        live.append({"kv": r["kv"], "tokens": np.asarray(r["tokens"], dtype=np.int64), "node": r["node"]})
        if n:
            write(rtt[r["kv"].req_pool_idx, :n].long(), live[-1]["tokens"][:n], np.arange(n))
    for k in keys:  # cached prefixes: the same (token, position) words
        m = tree.match_prefix(MatchPrefixParams(key=RadixKey(k)))
        idx = tree.path_device_indices(m.last_device_node)
        if len(idx):
            write(idx.long(), np.asarray(k[: len(idx)], dtype=np.int64), np.arange(len(idx)))
    target = max(8, args.slots // 4000)
    hook = None
    if with_hook:
        hook = DefragHook(
            settings=_stall_settings(args),
            target=Target(rtp, alloc, tree, [pool], owners=lambda: [r["kv"] for r in live]),
        )

    def finish(req, cache):
        kv = req["kv"]
        n = kv.kv_allocated_len
        idx = rtt[kv.req_pool_idx, :n].to(torch.int64)
        if cache:
            key = array("q", req["tokens"][:n].tolist())
            res = tree.insert(InsertParams(key=RadixKey(key), value=idx.clone()))
            alloc.free(idx[kv.cache_protected_len : res.prefix_len])
            keys.append(key)
        else:
            alloc.free(idx[kv.cache_protected_len :])
        if req["node"] is not None:
            tree.dec_lock_ref(req["node"])
        rtp.free_rows([kv.req_pool_idx])
        live.remove(req)

    def admit():
        row = rtp.alloc_rows(1)[0]
        toks = rng.integers(1, 50000, int(rng.integers(200, 4000))).astype(np.int64)
        kv = ReqKvInfo(req_pool_idx=row)
        req = {"kv": kv, "tokens": toks, "node": None, "prompt": len(toks) // 2}
        if keys and rng.random() < 0.3:
            k = keys[int(rng.integers(len(keys)))]
            h = min(len(k) // 2, len(toks))
            toks[:h] = np.asarray(k[:h], dtype=np.int64)
            m = tree.match_prefix(MatchPrefixParams(key=RadixKey(array("q", toks.tolist()))))
            pre = tree.path_device_indices(m.last_device_node)
            tree.inc_lock_ref(m.last_device_node)
            req["node"] = m.last_device_node
            if len(pre):
                rtt[row, : len(pre)] = pre.to(torch.int32)
            kv.kv_allocated_len = kv.kv_committed_len = kv.cache_protected_len = len(pre)
        live.append(req)

    step_ms, hook_ms, results, split = [], [], Counter(), {"gather_ms": [], "make_plan_ms": [], "verify_ms": []}
    for _ in range(args.steps):
        ts = time.perf_counter()
        # process_batch_result of the previous step: finished requests leave
        for req in list(live):
            if req["kv"].kv_allocated_len >= len(req["tokens"]) or rng.random() < args.finish_prob:
                finish(req, cache=rng.random() < 0.7)
        # get_next_batch_to_run: the hook first (as the plugin's wrapper calls it), then the batch
        if hook is not None:
            th = time.perf_counter()
            res = hook.step()
            results[res] += 1
            hook_ms.append((time.perf_counter() - th) * 1e3)
            if res == "ran":  # the planning part of this run, split (state read / plan / check)
                for k, xs in split.items():
                    xs.append(hook.last_run[k])
        while len(live) < target:
            admit()
        need = []
        for req in live:
            n = req["kv"].kv_allocated_len
            need.append(max(req.get("prompt", 0) - n, 1) if n < len(req["tokens"]) else 0)
        total = sum(need)
        if alloc.available_size() < total + 1:
            tree.evict(EvictParams(num_tokens=total + args.slots // 20))
            while alloc.available_size() < total + 1 and live:  # still full: drop the longest
                victim = max(live, key=lambda r: r["kv"].kv_allocated_len)
                j = live.index(victim)
                total -= need.pop(j)
                finish(victim, cache=False)
        if total:
            loc = alloc.alloc(total)
            rows_l, cols_l, toks_l = [], [], []
            for req, k in zip(live, need):
                if k:
                    n = req["kv"].kv_allocated_len
                    rows_l.append(np.full(k, req["kv"].req_pool_idx, dtype=np.int64))
                    cols_l.append(np.arange(n, n + k, dtype=np.int64))
                    toks_l.append(req["tokens"][n : n + k])
                    req["kv"].kv_allocated_len = req["kv"].kv_committed_len = n + k
            rows_a, cols_a = np.concatenate(rows_l), np.concatenate(cols_l)
            rtt[torch.as_tensor(rows_a, device=dev), torch.as_tensor(cols_a, device=dev)] = loc.to(torch.int32)
            write(loc.long(), np.concatenate(toks_l), cols_a)  # the forward writes the new KV
        if dev == "cuda":
            torch.cuda.synchronize()
        step_ms.append((time.perf_counter() - ts) * 1e3)
    # read everything back through today's indices
    lost, checked = 0, 0

    def bad_positions(idx, toks):
        if not len(idx):
            return 0
        want = torch.as_tensor(np.stack([toks, np.arange(len(toks))], axis=1).astype(np.int32), device=dev)
        bad = torch.zeros(len(idx), dtype=torch.bool, device=dev)
        for w in words:
            bad |= (w[idx, 0, 0:2] != want).any(dim=1)
        return int(bad.sum().item())

    rows_now = []
    for req in live:
        n = req["kv"].kv_allocated_len
        idx = rtt[req["kv"].req_pool_idx, :n].long()
        rows_now.append(idx)
        lost += bad_positions(idx, req["tokens"][:n])
        checked += n
    for k in keys:
        m = tree.match_prefix(MatchPrefixParams(key=RadixKey(k)))
        idx = tree.path_device_indices(m.last_device_node).long()
        lost += bad_positions(idx, np.asarray(k[: len(idx)], dtype=np.int64))
        checked += len(idx)
    from kv_defrag.ragged import tree_nodes_with_slots

    free = alloc.get_all_free_pages()
    held = torch.unique(torch.cat(rows_now + [n.value.long() for n in tree_nodes_with_slots(tree)]))
    errors = []
    if torch.unique(free).numel() != free.numel() or torch.isin(free, held).any():
        errors.append("free list holds a slot twice or a held slot")
    if held.numel() + free.numel() != args.slots:
        errors.append(f"slots leaked or doubled: {held.numel()} held + {free.numel()} free != {args.slots}")
    rpr = sum(1 + int((v[1:] != v[:-1] + 1).sum().item()) for v in rows_now if len(v)) / max(1, len(rows_now))
    doc = {
        "build_s": round(build_s, 3),
        "steps": args.steps,
        "step_ms": _pct(step_ms),
        "live_requests_end": len(live),
        "cached_keys_end": len(keys),
        "runs_per_request_end": round(rpr, 3),
        "positions_checked": checked,
        "lost_tokens": lost,
        "errors": errors,
    }
    if hook is not None:
        doc.update(
            hook_step_ms=_pct(hook_ms),
            hook_results=dict(results),
            hook_stall=hook.stall_summary(),
            hook_try_ms=[round(x, 3) for x in hook.stall_ms],
            hook_plan_split_ms={k: _pct(xs) for k, xs in split.items()},
            hook_runs=hook.runs,
            hook_tokens_moved=hook.tokens_moved,
            hook_disabled=hook.disabled,
            hook_skips=dict(hook.skips),
            hook_last_run=hook.last_run,
        )
    return doc


def stall(args) -> dict:
    """The hook's stall on the scheduler thread: the same seeded scheduler-step loop on the same
    churned world, without and with the hook (see :func:`_stall_world`); p50/p99 inter-step time
    of both, the hook's own time per step and per try (planning vs copy), and the gate
    ``hook try p99 <= --budget-ms``, with every token read back in both worlds."""
    dev = args.device
    torch, sgl = _load(dev)
    if torch is None:
        return sgl
    t0 = time.perf_counter()
    import gc

    without = _stall_world(sgl, torch, args, dev, with_hook=False)
    gc.collect()  # the first world's pools go before the second is built
    if dev == "cuda":
        torch.cuda.empty_cache()
    with_ = _stall_world(sgl, torch, args, dev, with_hook=True)
    st = with_["hook_stall"]
    try_p99 = st.get("total", {}).get("p99")
    correct = (
        without["lost_tokens"] == 0
        and with_["lost_tokens"] == 0
        and not without["errors"]
        and not with_["errors"]
        and with_["hook_disabled"] is None
    )
    ran = with_["hook_runs"] >= 1 and with_["hook_tokens_moved"] > 0
    within = try_p99 is not None and try_p99 <= args.budget_ms
    # what the hook's enforced budget (DefragSettings.stall_budget_ms = --budget-ms,
    # max_over_budget) would have done in the same loop: the try at which it disables itself
    from sglang_verify_plugin.defrag_hook import DefragSettings

    k, streak, disable_at = DefragSettings().max_over_budget, 0, None
    for i, ms in enumerate(with_["hook_try_ms"]):
        streak = streak + 1 if ms > args.budget_ms else 0
        if streak >= k:
            disable_at = i + 1
            break
    summary = {
        "slots": args.slots,
        "layers": args.layers,
        "steps": args.steps,
        "device": torch.cuda.get_device_name() if dev == "cuda" else "cpu",
        "budget_ms": args.budget_ms,
        "settings": dict(_stall_settings(args).__dict__),
        "step_p50_ms_without": without["step_ms"].get("p50"),
        "step_p99_ms_without": without["step_ms"].get("p99"),
        "step_p50_ms_with": with_["step_ms"].get("p50"),
        "step_p99_ms_with": with_["step_ms"].get("p99"),
        "step_p99_added_ms": round(with_["step_ms"]["p99"] - without["step_ms"]["p99"], 3),
        "step_mean_added_ms": round(with_["step_ms"]["mean"] - without["step_ms"]["mean"], 3),
        "hook_try_p50_ms": st.get("total", {}).get("p50"),
        "hook_try_p99_ms": try_p99,
        "hook_try_max_ms": st.get("total", {}).get("max"),
        "hook_plan_p99_ms": st.get("plan", {}).get("p99"),
        "hook_copy_p99_ms": st.get("copy", {}).get("p99"),
        "hook_tries": st.get("tries"),
        "hook_runs": with_["hook_runs"],
        "hook_tokens_moved": with_["hook_tokens_moved"],
        "runs_per_request_end_without": without["runs_per_request_end"],
        "runs_per_request_end_with": with_["runs_per_request_end"],
        "lost_tokens": without["lost_tokens"] + with_["lost_tokens"],
        "correct": correct,
        "hook_ran": ran,
        "stall_within_budget": within,
        "enforced_disable_at_try": disable_at,
    }
    return {
        "ok": bool(correct and ran and within),
        "summary": summary,
        "without_hook": without,
        "with_hook": with_,
        "seconds": round(time.perf_counter() - t0, 3),
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m sglang_verify_plugin.defrag_gpu_check")
    ap.add_argument("--json", action="store_true", help="print one JSON document (always JSON)")
    ap.add_argument("--slots", type=int, default=200_000)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--runs", type=int, default=16)
    ap.add_argument("--max-tokens-per-run", type=int, default=None, help="default 65536 (--stall: the hook's)")
    ap.add_argument("--max-rounds-per-run", type=int, default=None, help="default 8 (--stall: the hook's)")
    ap.add_argument(
        "--device",
        choices=("cuda", "cpu"),
        default="cuda",
        help="cpu: smoke run only (SGLang structures on CPU, torch executor); use small --slots",
    )
    ap.add_argument("--seed", type=int, default=0)
    stall_args = ap.add_argument_group("--stall: the hook's stall on the scheduler thread (p50/p99 inter-step time)")
    stall_args.add_argument("--stall", action="store_true", help="run the stall benchmark instead of the check")
    stall_args.add_argument("--steps", type=int, default=400)
    stall_args.add_argument("--budget-ms", type=float, default=10.0, help="gate: hook p99 per try <= this")
    stall_args.add_argument("--max-attempts-per-run", type=int, default=None, help="default: the hook's")
    stall_args.add_argument("--interval-steps", type=int, default=None, help="default: the hook's")
    stall_args.add_argument("--continue-interval-steps", type=int, default=None, help="default: the hook's")
    stall_args.add_argument("--min-runs-per-row", type=float, default=None, help="default: the hook's")
    stall_args.add_argument("--finish-prob", type=float, default=0.01)
    args = ap.parse_args(argv)
    if not args.stall:  # the check's own defaults (the stall bench uses the hook's defaults)
        args.max_tokens_per_run = 65536 if args.max_tokens_per_run is None else args.max_tokens_per_run
        args.max_rounds_per_run = 8 if args.max_rounds_per_run is None else args.max_rounds_per_run
    try:
        doc = stall(args) if args.stall else run(args)
    except Exception as exc:  # noqa: BLE001 - one JSON document whatever happens
        doc = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
    return emit(doc, True, indent=2, sort_keys=True, default=str)


if __name__ == "__main__":
    sys.exit(main())
