"""Realistic fragmentation: simulated allocation/free churn of an SGLang-like server.

Model of SGLang's page_size=1 allocator (``TokenToKVPoolAllocator``): allocation takes the
head of the free list; freed slots go to a release list that is merged and sorted into the
free list only when an allocation needs more than the free list holds. Per simulated step:

- finished requests (reached their target length) free their slots; a slot shared with a
  radix-cache prefix is freed when its last owner finishes (reference count);
- new requests are admitted while the pool has room: prompt length log-normal (heavy tail),
  prefilled in one allocation; a fraction of them reuse a prefix of a live request (the
  same slots in both req_to_token rows);
- every running request accepts 1..``max_accept`` tokens (speculative decoding); the batch's
  tokens are allocated in one call and handed out request by request, so concurrent
  requests interleave in the pool exactly as a decode batch does.

Everything is numpy and seeded: the same arguments give the same pool.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .pool import PoolError, PoolIndex


@dataclass(frozen=True)
class ChurnConfig:
    """Workload knobs. Lengths are tokens; ``fill`` is the target fraction of used slots."""

    num_slots: int
    seed: int = 0
    max_requests: int = 0  # 0: derive from num_slots and mean length
    max_context: int = 0  # 0: derive from num_slots
    median_prompt: int = 0  # 0: derive
    mean_output: int = 0  # 0: derive
    share_frac: float = 0.2
    max_accept: int = 4
    fill: float = 0.9
    churn: float = 3.0  # total tokens allocated / num_slots before stopping


def _derive(cfg: ChurnConfig) -> ChurnConfig:
    n = cfg.num_slots
    max_context = cfg.max_context or int(min(32768, max(64, n // 4)))
    median = cfg.median_prompt or max(8, min(2048, max_context // 16))
    mean_out = cfg.mean_output or max(8, median // 2)
    max_req = cfg.max_requests or int(max(4, min(512, 2 * n // max(1, median + mean_out))))
    return ChurnConfig(
        n, cfg.seed, max_req, max_context, median, mean_out, cfg.share_frac, cfg.max_accept, cfg.fill, cfg.churn
    )


def _check(cfg: ChurnConfig) -> None:
    if not isinstance(cfg.num_slots, (int, np.integer)) or cfg.num_slots < 16:
        raise PoolError(f"num_slots: must be an integer >= 16, got {cfg.num_slots!r}")
    if not 0.0 <= cfg.share_frac <= 1.0:
        raise PoolError(f"share_frac: must lie in [0, 1], got {cfg.share_frac!r}")
    if not 0.05 <= cfg.fill <= 1.0:
        raise PoolError(f"fill: must lie in [0.05, 1], got {cfg.fill!r}")
    if cfg.max_accept < 1:
        raise PoolError(f"max_accept: must be >= 1, got {cfg.max_accept!r}")
    if cfg.churn <= 0:
        raise PoolError(f"churn: must be > 0, got {cfg.churn!r}")


class _Allocator:
    def __init__(self, n: int):
        self.free = np.arange(1, n + 1, dtype=np.int64)
        self.head = 0
        self.released: list[np.ndarray] = []
        self.n_released = 0

    def available(self) -> int:
        return self.free.size - self.head + self.n_released

    def alloc(self, k: int) -> np.ndarray:
        if self.free.size - self.head < k:
            rest = [self.free[self.head :]] + self.released
            self.free = np.sort(np.concatenate(rest))
            self.head = 0
            self.released, self.n_released = [], 0
        out = self.free[self.head : self.head + k]
        self.head += k
        return out

    def release(self, slots: np.ndarray) -> None:
        if slots.size:
            self.released.append(slots)
            self.n_released += slots.size

    def all_free_sorted(self) -> np.ndarray:
        return np.sort(np.concatenate([self.free[self.head :]] + self.released)).astype(np.int64)


def simulate_churn(cfg: ChurnConfig) -> PoolIndex:
    """Run the churn simulation and return the pool index at the end (validated)."""
    _check(cfg)
    cfg = _derive(cfg)
    rng = np.random.default_rng(cfg.seed)
    n = cfg.num_slots
    rows = cfg.max_requests
    rtt = np.zeros((rows + 1, cfg.max_context), dtype=np.int32)
    lens = np.zeros(rows + 1, dtype=np.int64)
    target = np.zeros(rows + 1, dtype=np.int64)
    refcnt = np.zeros(n + 1, dtype=np.int32)
    alloc = _Allocator(n)
    free_rows = list(range(rows, 0, -1))
    running: list[int] = []
    allocated = 0
    sigma = 1.0

    def finish(row: int) -> None:
        s = rtt[row, : lens[row]].astype(np.int64)
        np.subtract.at(refcnt, s, 1)
        alloc.release(s[refcnt[s] == 0])
        lens[row] = 0
        free_rows.append(row)

    while allocated < cfg.churn * n:
        # 1. finish
        done = [q for q in running if lens[q] >= target[q]]
        for q in done:
            finish(q)
        running = [q for q in running if lens[q] > 0]
        # 2. admit
        budget = int(cfg.fill * n) - (n - alloc.available())
        while free_rows and budget > 0:
            prompt = int(min(cfg.max_context // 2, max(1, rng.lognormal(np.log(cfg.median_prompt), sigma))))
            out = int(min(cfg.max_context - prompt, max(1, rng.exponential(cfg.mean_output))))
            shared = 0
            parent = -1
            if running and rng.random() < cfg.share_frac:
                parent = running[int(rng.integers(len(running)))]
                shared = int(rng.integers(1, lens[parent] + 1)) if lens[parent] > 0 else 0
                shared = min(shared, prompt)
            need = prompt - shared
            if need > budget or need > alloc.available():
                break
            row = free_rows.pop()
            if shared:
                rtt[row, :shared] = rtt[parent, :shared]
            if need:
                rtt[row, shared:prompt] = alloc.alloc(need)
            refcnt[rtt[row, :prompt].astype(np.int64)] += 1
            lens[row] = prompt
            target[row] = prompt + out
            running.append(row)
            budget -= need
            allocated += need
        if not running:
            break
        # 3. decode: one batch allocation, handed out request by request
        acc = rng.integers(1, cfg.max_accept + 1, size=len(running))
        acc = np.minimum(acc, target[running] - lens[running])
        acc = np.maximum(acc, 0)
        total = int(acc.sum())
        while total > alloc.available() and running:
            victim = running.pop()  # retract the newest request, as the scheduler does
            finish(victim)
            acc = acc[:-1]
            total = int(acc.sum())
        if total == 0:
            continue
        slots = alloc.alloc(total)
        off = 0
        for q, a in zip(running, acc.tolist()):
            if a:
                rtt[q, lens[q] : lens[q] + a] = slots[off : off + a]
                refcnt[slots[off : off + a]] += 1
                lens[q] += a
                off += a
        allocated += total
    pool = PoolIndex(n, rtt, lens, alloc.all_free_sorted())
    pool.validate()
    return pool
