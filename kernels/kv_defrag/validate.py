"""End-to-end validation: churn -> plan -> execute -> check every live token in every layer.

Reference content by construction (an exact snapshot that costs no memory): before the
relocation every slot ``s`` of layer ``l`` holds the int32 words ``pattern(l, s, j)``,
``j < 576 * elem_size / 4``. Afterwards the token that lived in slot ``s0`` must sit in the slot
that ``req_to_token`` now names, with exactly ``pattern(l, s0, j)`` in every layer.

Index checks, from the executor's updated ``req_to_token`` (not from the plan):
- consistent: all owners of a slot before still share one slot after, distinct slots stay
  distinct (no slot gains an owner it did not have), every live position maps into ``1..N``;
- the free list is the exact complement of the live slots (slot 0 excluded);
- lost_tokens: live positions whose bytes differ in any layer or whose mapping is invalid.
"""

from __future__ import annotations

import time

import numpy as np

from .executor import execute
from .planner import plan_defrag
from .pool import PoolIndex, make_kv_buffers
from .workload import ChurnConfig, simulate_churn


def _pattern(layer: int, slots, words: int):
    """int32 ``[len(slots), words]``: a mix of (layer, slot, word); slots is an int64 tensor."""
    import torch

    j = torch.arange(words, device=slots.device, dtype=torch.int64)
    h = slots[:, None] * 2654435761 + j[None, :] * 97 + (layer + 1) * 40503
    h = h ^ (h >> 15)
    h = ((h & 0xFFFFF) * 2246822519 + (h >> 20)) & 0x7FFFFFFF
    return h.to(torch.int32)


def fill_pattern(kv, chunk: int = 1 << 16) -> None:
    """Write ``pattern(l, s, j)`` into every row 1..N of every layer of the stacked buffer."""
    import torch

    words = kv.view(torch.int32)
    n_rows, w = words.shape[1], words.shape[-1]
    for layer in range(words.shape[0]):
        for a in range(1, n_rows, chunk):
            b = min(n_rows, a + chunk)
            sl = torch.arange(a, b, device=kv.device, dtype=torch.int64)
            words[layer, a:b, 0, :] = _pattern(layer, sl, w)


def count_bad_slots(kv, old_slots: np.ndarray, new_slots: np.ndarray, chunk: int = 1 << 16) -> np.ndarray:
    """Bool per pair: True when slot ``new_slots[i]`` differs from ``pattern(l, old_slots[i])``
    in any layer l."""
    import torch

    words = kv.view(torch.int32)
    w = words.shape[-1]
    bad = torch.zeros(old_slots.size, dtype=torch.bool, device=kv.device)
    old_t = torch.as_tensor(old_slots, device=kv.device)
    new_t = torch.as_tensor(new_slots, device=kv.device)
    for layer in range(words.shape[0]):
        for a in range(0, old_slots.size, chunk):
            b = min(old_slots.size, a + chunk)
            got = words[layer, :, 0, :].index_select(0, new_t[a:b])
            bad[a:b] |= (got != _pattern(layer, old_t[a:b], w)).any(dim=1)
    return bad.cpu().numpy()


def check_index(before: PoolIndex, rtt_after: np.ndarray, free_after: np.ndarray) -> dict:
    """Index-side checks (see module docstring). Returns counts and booleans, plus the
    (old slot, new slot) pair per live position for the data check."""
    n = before.num_slots
    r, p, s0 = before.live_positions()
    s1 = rtt_after[r, p].astype(np.int64)
    in_range = (s1 >= 1) & (s1 <= n)
    order = np.argsort(s0, kind="stable")
    s0o, s1o = s0[order], s1[order]
    same_old = s0o[1:] == s0o[:-1]
    split = np.zeros(s0.size, dtype=bool)  # a shared slot whose owners now disagree
    split_o = np.zeros(s0.size, dtype=bool)
    split_o[1:] = same_old & (s1o[1:] != s1o[:-1])
    split[order] = split_o
    old_mark = np.zeros(n + 1, dtype=bool)
    old_mark[s0] = True
    s1c = np.clip(s1, 0, n)
    new_mark = np.zeros(n + 1, dtype=bool)
    new_mark[s1c] = True
    merged = int(old_mark.sum()) != int(new_mark.sum())  # two old slots collapsed into one
    free = np.asarray(free_after, dtype=np.int64)
    free_ok = bool(
        free.ndim == 1
        and (free.size == 0 or (free.min() >= 1 and free.max() <= n and np.all(np.diff(free) > 0)))
        and not new_mark[np.clip(free, 0, n)].any()
        and free.size + int(new_mark[1:].sum()) == n
    )
    consistent = bool(in_range.all() and not split.any() and not merged and free_ok)
    return {
        "consistent": consistent,
        "positions_out_of_range": int((~in_range).sum()),
        "shared_slots_split": int(split.sum()),
        "slots_merged": bool(merged),
        "free_list_exact_complement": free_ok,
        "_pairs": (s0, s1c, ~in_range | split),
    }


def run_validate(
    slots: int,
    layers: int,
    dtype_name: str,
    device: str,
    min_run: int | None,
    seed: int,
    backend: str = "auto",
    log=lambda *_: None,
    kernel_kind: str = "rows",
    block_m: int = 8,
) -> dict:
    """Build a churned pool, plan, execute on real buffers, check. Returns the JSON document."""
    import torch

    dtype = torch.bfloat16 if dtype_name == "bf16" else torch.uint8
    t0 = time.perf_counter()
    pool = simulate_churn(ChurnConfig(slots, seed=seed))
    t1 = time.perf_counter()
    log(f"workload: {pool.live_requests().size} requests, {pool.live_slots().size} live slots, {t1 - t0:.1f}s")
    plan = plan_defrag(pool, min_run=min_run)
    t2 = time.perf_counter()
    log(f"plan: {plan.tokens_moved} moves in {len(plan.rounds)} rounds, {(t2 - t1) * 1e3:.0f} ms")
    kv = make_kv_buffers(slots, layers, dtype, device)
    fill_pattern(kv)
    rtt = torch.as_tensor(pool.req_to_token.copy(), device=device)
    res = execute(
        plan, kv, req_to_token=rtt, seq_lens=pool.seq_lens, backend=backend, kernel_kind=kernel_kind, block_m=block_m
    )
    log(f"execute: {res.backend}, {res.launches} launches, copy {res.copy_s:.3f}s index {res.index_s:.3f}s")
    idx = check_index(pool, rtt.cpu().numpy(), res.free_slots)
    s0, s1, bad_idx = idx.pop("_pairs")
    uniq_old, first = np.unique(s0, return_index=True)
    bad_slot = count_bad_slots(kv, uniq_old, s1[first])
    bad_old = np.zeros(slots + 1, dtype=bool)
    bad_old[uniq_old[bad_slot]] = True
    lost = int((bad_old[s0] | bad_idx).sum())
    t3 = time.perf_counter()
    summary = {
        "lost_tokens": lost,
        "consistent": idx["consistent"],
        "tokens_moved": plan.tokens_moved,
        "bytes_moved": plan.bytes_moved(layers, kv.element_size()),
        "staged_tokens": plan.staged_tokens,
        "rounds": len(plan.rounds),
        "steps": plan.copy_steps,
        "frag_before": plan.frag_before.as_dict(),
        "frag_after": plan.frag_after.as_dict(),
        "planner_ms": round((t2 - t1) * 1e3, 3),
        "copy_s": round(res.copy_s, 6),
        "slots": slots,
        "layers": layers,
        "live_tokens": plan.frag_before.live_tokens,
        "live_slots": plan.frag_before.unique_slots,
    }
    ok = lost == 0 and idx["consistent"]
    return {
        "ok": ok,
        "tool": "kv_defrag",
        "mode": "validate",
        "summary": summary,
        "checks": idx,
        "config": {
            "slots": slots,
            "layers": layers,
            "dtype": dtype_name,
            "device": str(device),
            "min_run": min_run,
            "seed": seed,
            "backend": res.backend,
            "backend_note": res.note,
            "triton_kernel": f"{kernel_kind}/block_m={block_m}" if res.backend == "triton" else None,
            "pool_bytes": int(kv.numel() * kv.element_size()),
            "workload_s": round(t1 - t0, 3),
            "total_s": round(t3 - t0, 3),
        },
        "plan": {"stop_reason": plan.stop_reason, "notes": plan.notes, "round_modes": [r.mode for r in plan.rounds]},
    }
