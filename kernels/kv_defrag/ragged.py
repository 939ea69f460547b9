"""A :class:`~kv_defrag.pool.PoolIndex` whose rows are stored ragged (no dense matrix).

A live SGLang service has a few long requests and many short ones, plus every radix-tree
node as an extra row (kernels/sglang_verify_plugin/defrag_hook.py); a dense ``[rows, max_len]``
int32 matrix of that would be rows x the longest row. :class:`RaggedPoolIndex` keeps the
rows' live slots concatenated instead (memory = live positions) and presents the same
interface to :func:`~kv_defrag.planner.plan_defrag` and
:func:`~kv_defrag.pool.validate_pool`: ``req_to_token`` is a read-only zero-stride view
(right shape and dtype, no memory; never indexed by the planner for this class), and
:meth:`live_positions` reads the concatenated slots. Do not pass it to
``planner.apply_plan`` / ``apply_round`` (they copy ``req_to_token``); use :meth:`remapped`.
numpy only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from .pool import PoolError, PoolIndex


@dataclass(frozen=True)
class RaggedPoolIndex(PoolIndex):
    """``slots``: int64, the live slots of rows 1..R concatenated in row order (row r
    contributes ``seq_lens[r]`` entries)."""

    slots: np.ndarray = None  # type: ignore[assignment]

    def live_positions(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        # computed once per (immutable) index: the hook's validation, fragmentation metric and
        # planner each ask for it on the scheduler thread
        cached = self.__dict__.get("_positions")
        if cached is not None:
            return cached
        out = self._live_positions()
        object.__setattr__(self, "_positions", out)
        return out

    def _live_positions(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        reqs = self.live_requests()
        lens = self.seq_lens[reqs].astype(np.int64)
        n = int(lens.sum())
        if self.slots is None or self.slots.shape != (n,):
            raise PoolError(
                f"slots: expected {n} concatenated live slots, got {None if self.slots is None else self.slots.shape}"
            )
        r = np.repeat(reqs, lens)
        starts = np.repeat(np.cumsum(lens) - lens, lens)
        p = np.arange(n, dtype=np.int64) - starts
        return r, p, self.slots

    def remapped(self, remap: np.ndarray, free_after: np.ndarray) -> RaggedPoolIndex:
        """The index after moving every slot ``s`` to ``remap[s]`` (pure)."""
        return RaggedPoolIndex(self.num_slots, self.req_to_token, self.seq_lens, free_after, slots=remap[self.slots])


def ragged_pool(num_slots: int, rows: list[np.ndarray], free_slots: np.ndarray) -> RaggedPoolIndex:
    """Build an index with rows 1..len(rows) (row k+1 = ``rows[k]``, slot per position)."""
    lens = np.array([0] + [int(r.size) for r in rows], dtype=np.int64)
    width = max(1, int(lens.max()) if lens.size else 1)
    base = np.zeros(1, dtype=np.int32)
    rtt = np.lib.stride_tricks.as_strided(base, shape=(len(rows) + 1, width), strides=(0, 0), writeable=False)
    slots = np.concatenate([np.asarray(r, dtype=np.int64) for r in rows]) if rows else np.zeros(0, dtype=np.int64)
    return RaggedPoolIndex(int(num_slots), rtt, lens, np.asarray(free_slots, dtype=np.int64), slots=slots)


def tree_nodes_with_slots(tree_cache: Any) -> list[Any]:
    """The radix-tree nodes of an SGLang ``RadixCache`` that hold KV slots (``node.value``, a
    1-D tensor of slot ids; the root excluded), depth-first; ``[]`` for a disabled cache. Their
    slots are the evictable rows a defrag run must move with the live requests."""
    if getattr(tree_cache, "disable", False):
        return []
    out, stack = [], list(tree_cache.root_node.children.values())
    while stack:
        n = stack.pop()
        if n.value is not None and len(n.value):
            out.append(n)
        stack.extend(n.children.values())
    return out
