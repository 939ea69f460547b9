"""A model of SGLang's MLA KV pool index structures (page_size=1).

Mirrors ``MLATokenToKVPool`` + ``ReqToTokenPool`` + the token allocator
(docs/sglang-verify-surface.md section 3):

- KV buffers: one per layer, shape ``[num_slots + 1, 1, 576]`` (bf16, or uint8 for fp8
  caches); row 0 is the reserved dummy slot. Here the layers are stacked into one
  tensor ``[layers, num_slots + 1, 1, 576]`` whose ``[l]`` view is SGLang's per-layer buffer
  (see :func:`make_kv_buffers`; torch is imported lazily).
- ``req_to_token``: int32 ``[requests + 1, max_context]``; ``[r, p]`` is the slot of token
  position ``p`` of request ``r``; row 0 is padding. Only positions ``< seq_lens[r]`` are live.
- ``free_slots``: the allocator's free slots, int64, ascending; the exact complement of the
  live slots in ``1..num_slots``.

A slot may appear in several rows (radix-cache prefix sharing); it is then one token with
several owners. This module is numpy-only.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

KV_DIM = 576
"""Width of one MLA cache row: 512 latent (kv_lora_rank) + 64 rope dims."""


class PoolError(ValueError):
    """Invalid pool state; the message names the offending field."""


@dataclass(frozen=True)
class PoolIndex:
    """Index side of an MLA pool: which request position lives in which slot.

    num_slots: usable slots are ``1..num_slots`` (slot 0 is reserved).
    req_to_token: int32 ``[requests + 1, max_context]``.
    seq_lens: int64 ``[requests + 1]``; 0 for rows that are not live (and for row 0).
    free_slots: int64, strictly ascending, values in ``1..num_slots``.
    """

    num_slots: int
    req_to_token: np.ndarray
    seq_lens: np.ndarray
    free_slots: np.ndarray

    @property
    def num_requests(self) -> int:
        """Rows of req_to_token excluding the padding row 0."""
        return int(self.req_to_token.shape[0]) - 1

    def live_requests(self) -> np.ndarray:
        """Row ids (int64, ascending) with seq_len > 0."""
        return np.flatnonzero(self.seq_lens > 0).astype(np.int64)

    def live_positions(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """All live (request, position, slot) triples as three int64 arrays, request-major."""
        reqs = self.live_requests()
        lens = self.seq_lens[reqs]
        r = np.repeat(reqs, lens)
        starts = np.repeat(np.cumsum(lens) - lens, lens)
        p = np.arange(int(lens.sum()), dtype=np.int64) - starts
        s = self.req_to_token[r, p].astype(np.int64)
        return r, p, s

    def live_slots(self) -> np.ndarray:
        """Distinct live slots, int64 ascending."""
        return np.unique(self.live_positions()[2])

    def validate(self) -> None:
        """Raise :class:`PoolError` (one line, naming the field) if the state is inconsistent."""
        validate_pool(self)


def validate_pool(pool: PoolIndex) -> None:
    """Check shapes, dtypes, ranges, and that free slots are the exact complement of live slots."""
    n = pool.num_slots
    if not isinstance(n, (int, np.integer)) or n < 1:
        raise PoolError(f"num_slots: must be an integer >= 1, got {n!r}")
    rtt = pool.req_to_token
    if not isinstance(rtt, np.ndarray) or rtt.ndim != 2 or rtt.dtype != np.int32:
        raise PoolError("req_to_token: must be an int32 numpy array [requests + 1, max_context]")
    if rtt.shape[0] < 1:
        raise PoolError("req_to_token: needs at least the padding row 0")
    lens = pool.seq_lens
    if not isinstance(lens, np.ndarray) or lens.shape != (rtt.shape[0],) or lens.dtype.kind not in "iu":
        raise PoolError(f"seq_lens: must be an integer array of shape ({rtt.shape[0]},)")
    if lens.size and (lens.min() < 0 or lens.max() > rtt.shape[1]):
        bad = int(np.flatnonzero((lens < 0) | (lens > rtt.shape[1]))[0])
        raise PoolError(f"seq_lens: row {bad} has length {int(lens[bad])} outside 0..{rtt.shape[1]}")
    if lens[0] != 0:
        raise PoolError("seq_lens: row 0 is padding and must have length 0")
    free = pool.free_slots
    if not isinstance(free, np.ndarray) or free.ndim != 1 or free.dtype.kind not in "iu":
        raise PoolError("free_slots: must be a 1-D integer numpy array")
    if free.size:
        if free.min() < 1 or free.max() > n:
            raise PoolError(f"free_slots: values must lie in 1..{n}")
        if np.any(np.diff(free) <= 0):
            raise PoolError("free_slots: must be strictly ascending (no duplicates)")
    r, p, s = pool.live_positions()
    if s.size and (s.min() < 1 or s.max() > n):
        i = int(np.flatnonzero((s < 1) | (s > n))[0])
        raise PoolError(f"req_to_token: request {int(r[i])} position {int(p[i])} holds slot {int(s[i])} outside 1..{n}")
    # A slot may be shared across requests, but not appear twice within one request.
    key = np.sort(r * (n + 1) + s)
    if key.size > 1 and np.any(key[1:] == key[:-1]):
        raise PoolError("req_to_token: a request holds the same slot at two positions")
    used = np.zeros(n + 1, dtype=bool)
    used[s] = True
    if np.any(used[free]):
        slot = int(free[np.flatnonzero(used[free])[0]])
        raise PoolError(f"free_slots: slot {slot} is both free and live")
    if int(used[1:].sum()) + free.size != n:
        raise PoolError(f"free_slots: {free.size} free + {int(used[1:].sum())} live != num_slots {n} (leaked slots)")


def make_kv_buffers(num_slots: int, layers: int, dtype, device="cpu"):
    """Stacked KV buffers ``[layers, num_slots + 1, 1, 576]`` of ``dtype`` (bf16 or uint8), zeroed.

    ``buf[l]`` has SGLang's per-layer shape and strides (576, 576, 1).
    """
    import torch

    if dtype not in (torch.bfloat16, torch.uint8):
        raise PoolError(f"dtype: must be torch.bfloat16 or torch.uint8 (fp8 storage), got {dtype}")
    return torch.zeros((layers, num_slots + 1, 1, KV_DIM), dtype=dtype, device=device)
