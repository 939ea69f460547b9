"""Run the bundled KV defragmenter (``kv_defrag``) inside a live SGLang 0.5.23 scheduler.

Installation point: ``Scheduler.get_next_batch_to_run`` (``sglang.srt.managers.scheduler``),
wrapped so that the defragmenter may run *before* the original is called. Why there:

- both event loops (``event_loop_normal`` and ``event_loop_overlap``) call it exactly once per
  iteration, after ``ingest_requests`` and before the next batch is built, allocated or launched;
- in the normal loop the previous batch's ``run_batch`` + ``process_batch_result`` have
  completed, so nothing is in flight and ``req_to_token`` / the radix tree / the allocator are in
  their between-steps state (the state SGLang's own ``SchedulerInvariantChecker`` audits);
- in the overlap loop the previous batch is still in flight while ``result_queue`` is not
  empty; the hook then skips (counted as ``overlap_batch_in_flight``) and only runs after an
  idle iteration (queue empty);
- CUDA graphs are captured while the model runner is built (``Scheduler.__init__``), never from
  the event loop, so the hook never runs during capture; it also refuses while
  ``torch.cuda.is_current_stream_capturing()``.
``on_idle`` would be safer still but never runs on a busy server; ``process_batch_result`` runs
while the next batch is in flight in overlap mode.

Stall on the scheduler thread: a run is budgeted. The planner stops placing once
``max_tokens_per_run`` slots would move or ``max_attempts_per_run`` scan steps (requests
visited, gaps and run pieces examined) are spent, and the next run resumes the scan where this
one stopped (``cursor``), ``continue_interval_steps`` later while work remains; a whole sweep
of empty scans counts as converged (then ``interval_steps``). What is left per run is an
O(pool) floor (state read, validation, fragmentation metric, index build). The hook's own
time per try (total, planning, copy) is in ``active.json`` (``defrag_stall_ms``); the measured
p50/p99 with and without the hook: ``defrag_gpu_check --stall``, docs/kernels/kv-defrag-results.md.

What one run does: up to ``max_rounds_per_run`` rounds, each complete in itself (steps 1-4
below, the state re-read at every round). Every destination slot of a round is free when that
round starts, so a failure at any point of a round leaves every live token's bytes, the index,
the tree and the free list as the previous round left them (earlier rounds stay applied; each
is consistent) and disables the hook. The run stops when a round has nothing to move or no
gain, after ``max_rounds_per_run`` rounds, or once ``max_tokens_per_run`` slots have moved;
later runs continue where it stopped.

1. owners of KV rows: SGLang's own ``SchedulerInvariantChecker._requests_owning_rows()``
   (last batch, running batch, the parked chunked-prefill request) plus the radix cache's
   session records; every row the ``ReqToTokenPool`` has handed out must belong to exactly one
   of them (else skip: an owner this hook does not know about);
2. rows ``req_to_token[r, :kv_allocated_len]`` of those owners, plus one extra row per radix
   tree node (``node.value``, evictable ones included) so cached prefixes are preserved and a
   slot shared by a tree node and requests moves once; the allocator's free list
   (``free_pages`` + ``release_pages``); the union must be exactly the slot space (else skip);
3. plan one incremental round (``plan_defrag(max_rounds=1, compact=False, split=True)``: a gap
   that fits no free extent whole is split into pieces of whole runs over several free
   extents, so heavily churned, mostly full pools still make progress; slots a round vacates
   grow the free extents of the next), capped at what is left of ``max_tokens_per_run``,
   verified independently (sources live, destinations free, remap injective, the result
   validates with the free list as the exact complement);
4. all new index tensors are built first; then every layer of every MLA KV pool on the
   allocator's slot space (the target's and any draft model's) is relocated with the bundled
   executor; the device is synchronised; then ``req_to_token`` rows are rewritten in place,
   tree node values replaced, and the allocator's free list set to the exact complement.

It attaches (per scheduler) only for page_size 1, a plain ``TokenToKVPoolAllocator``,
``ReqToTokenPool``, ``RadixCache``, plain ``MLATokenToKVPool`` (bf16 or fp8-as-uint8, 576 wide),
no PP / disaggregation / PD-multiplexing / hierarchical or unified cache / hybrid SWA or SSM;
otherwise ``active.json`` says why (``defrag_applied: false``). An exception in a run
disables the hook for the process and records the reason. Rate limit: every
``interval_steps`` calls (scheduler steps, not wall time, so TP ranks stay in lockstep) and only
when rows average ``min_runs_per_row`` runs or more.
"""

from __future__ import annotations

import functools
import logging
from collections import Counter, deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from kv_defrag.ragged import tree_nodes_with_slots

log = logging.getLogger("sglang_verify_plugin.defrag")

SCHEDULER_MODULE = "sglang.srt.managers.scheduler"
HOOK_METHOD = "get_next_batch_to_run"
_MARK = "_orchestrator_defrag_wrapper"
STATE_ATTR = "_orchestrator_defrag"
KV_DIM = 576
STALL_WINDOW = 1024  # tries kept for the stall percentiles in active.json


class DefragUnsupported(Exception):
    """This scheduler's structures are not ones the hook can relocate safely."""


class DefragSkip(Exception):
    """Skip this step; ``args[0]`` is the counted reason, ``args[1]`` optional detail."""


@dataclass(frozen=True)
class DefragSettings:
    interval_steps: int = 64  # try at most once every this many scheduler steps
    min_runs_per_row: float = 2.0  # trigger: mean runs per row (requests + tree nodes)
    min_live_tokens: int = 1024  # trigger: at least this many live row positions
    # Planning budget of one run (one scheduler step), all its rounds: the planner stops placing
    # once this many slots would move, so the run's CPU time is bounded by the budget (plus a
    # per-round floor that grows with the pool), not by how fragmented the pool is. Measured
    # stall: docs/kernels/kv-defrag-results.md, "Scheduler-thread stall".
    max_tokens_per_run: int = 2048
    # Scan budget of one run: requests visited plus gaps and run pieces examined by the planner
    # (runs that cannot move cost scanning but no move). The next run resumes the scan where
    # this one stopped (``DefragHook.cursor``), so successive runs sweep every request.
    max_attempts_per_run: int = 1024
    max_rounds_per_run: int = 1  # incremental rounds per run (each: gather, plan, verify, copy, swap)
    # A run that stopped on its budget (more to do) is resumed this many steps later (capped at
    # interval_steps); a run that converged, or a skip, waits interval_steps.
    continue_interval_steps: int = 4
    backend: str = "auto"  # executor backend: auto (Triton on CUDA), torch, triton
    # Enforced stall budget: a try (one scheduler step's run or skip) longer than this counts
    # as over budget; max_over_budget such tries in a row disable the hook for the process
    # (reason in defrag_last_error). 0 turns enforcement off (the stall benchmark measures the
    # unbounded hook). 10 ms: ~1/3 of one target-verify step's attention alone on an H200
    # (61 layers x 469 us, docs/kernels/kv-defrag-results.md), so a stalled step stays < 1.5x.
    stall_budget_ms: float = 10.0
    max_over_budget: int = 3

    @classmethod
    def from_mapping(cls, doc: Mapping[str, Any] | None) -> DefragSettings:
        doc = dict(doc or {})
        unknown = set(doc) - set(cls.__dataclass_fields__)
        if unknown:
            raise ValueError(f"defrag_options: unknown key(s) {sorted(unknown)}")
        s = cls(**doc)
        if not (isinstance(s.interval_steps, int) and s.interval_steps >= 1):
            raise ValueError("defrag_options.interval_steps must be an integer >= 1")
        if not (isinstance(s.max_tokens_per_run, int) and s.max_tokens_per_run >= 1):
            raise ValueError("defrag_options.max_tokens_per_run must be an integer >= 1")
        if not (isinstance(s.max_rounds_per_run, int) and s.max_rounds_per_run >= 1):
            raise ValueError("defrag_options.max_rounds_per_run must be an integer >= 1")
        if not (isinstance(s.max_attempts_per_run, int) and s.max_attempts_per_run >= 1):
            raise ValueError("defrag_options.max_attempts_per_run must be an integer >= 1")
        if not (isinstance(s.continue_interval_steps, int) and s.continue_interval_steps >= 1):
            raise ValueError("defrag_options.continue_interval_steps must be an integer >= 1")
        if not (isinstance(s.min_live_tokens, int) and s.min_live_tokens >= 0):
            raise ValueError("defrag_options.min_live_tokens must be an integer >= 0")
        if not isinstance(s.min_runs_per_row, (int, float)) or s.min_runs_per_row < 1:
            raise ValueError("defrag_options.min_runs_per_row must be a number >= 1")
        if not isinstance(s.stall_budget_ms, (int, float)) or s.stall_budget_ms < 0:
            raise ValueError("defrag_options.stall_budget_ms must be a number >= 0 (0: not enforced)")
        if not (isinstance(s.max_over_budget, int) and s.max_over_budget >= 1):
            raise ValueError("defrag_options.max_over_budget must be an integer >= 1")
        if s.backend not in ("auto", "torch", "triton"):
            raise ValueError("defrag_options.backend must be auto, torch or triton")
        return s


# --------------------------------------------------------------------------- the structures


@dataclass
class Target:
    """The real SGLang objects one run works on (all in one slot space)."""

    req_to_token_pool: Any
    allocator: Any
    tree_cache: Any
    kv_pools: list
    owners: Callable[[], list]  # -> ReqKvInfo-like records (req_pool_idx, kv_allocated_len)
    in_flight: Callable[[], str | None] = lambda: None  # -> reason to skip, or None


def _exact(obj: Any, module: str, name: str) -> bool:
    t = type(obj)
    return t.__module__ == module and t.__name__ == name


def check_structures(req_to_token_pool: Any, allocator: Any, tree_cache: Any, kv_pools: list) -> None:
    """Raise :class:`DefragUnsupported` naming the first structure the hook cannot handle."""
    import torch

    if not _exact(allocator, "sglang.srt.mem_cache.allocator.token", "TokenToKVPoolAllocator"):
        raise DefragUnsupported(
            f"allocator is {type(allocator).__name__}, not TokenToKVPoolAllocator "
            "(paged, hybrid/SWA or unified allocators are not supported)"
        )
    if getattr(allocator, "page_size", None) != 1:
        raise DefragUnsupported(f"page_size is {getattr(allocator, 'page_size', None)}, only 1 is supported")
    if not _exact(req_to_token_pool, "sglang.srt.mem_cache.memory_pool", "ReqToTokenPool"):
        raise DefragUnsupported(f"req_to_token_pool is {type(req_to_token_pool).__name__}, not ReqToTokenPool")
    if getattr(req_to_token_pool, "pre_alloc_size", 0):
        raise DefragUnsupported("req_to_token_pool has pre-allocated rows (disaggregated decode)")
    if getattr(req_to_token_pool, "_aux_cache", None) is not None:
        raise DefragUnsupported("req_to_token_pool has an aux cache attached")
    if not _exact(tree_cache, "sglang.srt.mem_cache.radix_cache", "RadixCache"):
        raise DefragUnsupported(f"tree cache is {type(tree_cache).__name__}, not RadixCache")
    if getattr(tree_cache, "page_size", 1) != 1:
        raise DefragUnsupported("tree cache page_size != 1")
    if not kv_pools:
        raise DefragUnsupported("no KV pool found on the allocator")
    for pool in kv_pools:
        name = type(pool).__name__
        if not _exact(pool, "sglang.srt.mem_cache.memory_pool", "MLATokenToKVPool"):
            raise DefragUnsupported(f"KV pool is {name}, not MLATokenToKVPool (only plain MLA pools are supported)")
        if getattr(pool, "use_dsa", False) or getattr(pool, "kv_scale_buffer", None) is not None:
            raise DefragUnsupported(f"{name} uses DSA or scale buffers")
        if getattr(pool, "layer_shard_enabled", False) or getattr(pool, "post_capture_active", False):
            raise DefragUnsupported(f"{name} is layer-sharded or post-capture backed")
        if getattr(pool, "page_size", 1) != 1 or getattr(pool, "kv_cache_dim", None) != KV_DIM:
            raise DefragUnsupported(f"{name}: page_size {pool.page_size}, kv_cache_dim {pool.kv_cache_dim}")
        if pool.size != allocator.size:
            raise DefragUnsupported(f"{name} has {pool.size} slots, the allocator {allocator.size}")
        for i, t in enumerate(pool.kv_buffer):
            if (
                t.dtype not in (torch.bfloat16, torch.uint8)
                or tuple(t.shape) != (pool.size + 1, 1, KV_DIM)
                or not t.is_contiguous()
            ):
                raise DefragUnsupported(
                    f"{name}.kv_buffer[{i}] is {t.dtype} {tuple(t.shape)}; expected a contiguous "
                    f"bf16/uint8 [{pool.size + 1}, 1, {KV_DIM}]"
                )


# --------------------------------------------------------------------------- one run


@dataclass
class _State:
    rows: np.ndarray  # req_to_token row ids of the owners (int64)
    lens: np.ndarray  # their kv_allocated_len
    sub: np.ndarray  # req_to_token[rows, :W] on the host (int32)
    nodes: list  # radix tree nodes with a value (root excluded)
    node_vals: list  # their values on the host (int64)
    free: np.ndarray  # sorted free slots (int64)
    pool: Any  # RaggedPoolIndex over owner rows then node rows


def gather(target: Target) -> _State:
    """Read the between-steps state; :class:`DefragSkip` if it is not self-consistent."""
    import torch

    from kv_defrag.pool import PoolError
    from kv_defrag.ragged import ragged_pool

    rtp, alloc = target.req_to_token_pool, target.allocator
    if getattr(alloc, "free_group", None) is not None:
        raise DefragSkip("free_group_open")
    rtt = rtp.req_to_token
    owners = target.owners()
    rows = [int(kv.req_pool_idx) for kv in owners if kv.req_pool_idx is not None]
    lens = [int(kv.kv_allocated_len) for kv in owners if kv.req_pool_idx is not None]
    if len(set(rows)) != len(rows):
        raise DefragSkip("inconsistent", "two owners claim the same req_to_token row")
    handed_out = set(range(1, rtp.size + 1)) - set(int(x) for x in rtp.free_slots)
    if handed_out != set(rows):
        extra = sorted(handed_out - set(rows))[:5]
        raise DefragSkip("unowned_rows", f"req_to_token rows {extra} are held by an owner the hook does not know")
    if any(n < 0 or n > rtt.shape[1] for n in lens):
        raise DefragSkip("inconsistent", "a kv_allocated_len lies outside the row")
    rows_a = np.asarray(rows, dtype=np.int64)
    lens_a = np.asarray(lens, dtype=np.int64)
    width = int(lens_a.max()) if lens_a.size else 0
    if rows_a.size and width:
        sub = rtt[torch.as_tensor(rows_a, device=rtt.device), :width].cpu().numpy()
    else:
        sub = np.zeros((rows_a.size, width), dtype=np.int32)
    nodes = tree_nodes_with_slots(target.tree_cache)
    node_vals = []
    if nodes:  # one device->host copy for all node values (not one synchronising copy per node)
        flat = torch.cat([n.value.detach().reshape(-1) for n in nodes]).cpu().numpy().astype(np.int64)
        node_vals = np.split(flat, np.cumsum([int(n.value.numel()) for n in nodes])[:-1])
    raw = alloc.get_all_free_pages().detach().cpu().numpy().astype(np.int64)
    if raw.size and (raw.min() < 1 or raw.max() > alloc.size):
        raise DefragSkip("inconsistent", "the allocator's free list holds a slot outside 1..size")
    # sorted and duplicate-checked in O(slots) (a mark array, not a sort of the free list)
    mark = np.zeros(alloc.size + 1, dtype=bool)
    mark[raw] = True
    free = np.flatnonzero(mark).astype(np.int64)
    if free.size != raw.size:
        raise DefragSkip("inconsistent", "the allocator's free list holds a slot twice")
    row_list = [sub[i, : lens_a[i]].astype(np.int64) for i in range(rows_a.size)] + node_vals
    pool = ragged_pool(alloc.size, row_list, free)
    try:
        pool.validate()  # ranges, no slot twice in a row, free list == exact complement
    except PoolError as exc:
        raise DefragSkip("inconsistent", str(exc)) from exc
    return _State(rows_a, lens_a, sub, nodes, node_vals, free, pool)


def make_plan(
    state: _State,
    settings: DefragSettings,
    budget: int | None = None,
    first: bool = True,
    cursor: dict | None = None,
):
    """One round's plan (one incremental round, split over free extents where a gap fits none
    whole), planned under a budget of ``budget`` moves (default ``max_tokens_per_run``) and
    ``max_attempts_per_run`` scan steps: the planner stops there, so planning time is bounded
    by the budgets; or :class:`DefragSkip`. ``first``: the run's first round (the trigger
    thresholds apply only there). ``cursor``: ``{"at": i}``, where the scan starts; set to where
    it stopped (0 after a full pass)."""
    from kv_defrag.planner import fragmentation, plan_defrag

    before = fragmentation(state.pool)
    if first and (before.live_tokens < settings.min_live_tokens or before.runs_per_request < settings.min_runs_per_row):
        raise DefragSkip("below_threshold")
    if state.free.size == 0:
        raise DefragSkip("no_free_slot")
    cap = settings.max_tokens_per_run if budget is None else int(budget)
    if cap < 1:
        raise DefragSkip("budget_spent")
    # state.pool was validated by gather(); the planner need not validate it again
    cursor = {"at": 0} if cursor is None else cursor
    plan = plan_defrag(
        state.pool,
        min_run=None,
        max_rounds=1,
        compact=False,
        split=True,
        max_moves=cap,
        frag_before=before,
        check=False,
        max_attempts=settings.max_attempts_per_run,
        start=cursor["at"],
    )
    cursor["at"] = plan.resume_at or 0
    if not plan.rounds:
        # the scan budget ran out before anything could move: the next run scans on from here
        if plan.resume_at is None:
            raise DefragSkip("nothing_to_move")
        raise DefragSkip("scan_budget_spent", plan.stop_reason, int(plan.frag_before.requests), int(plan.scanned))
    if plan.rounds[0].src.size > cap:
        raise AssertionError(f"the planner moved {plan.rounds[0].src.size} slots over its budget of {cap}")
    if plan.frag_after.runs >= before.runs:
        raise DefragSkip("no_gain")
    return plan


def verify_plan(state: _State, plan) -> None:
    """Independent check of the plan against the gathered state; raises AssertionError."""
    n = plan.num_slots
    if len(plan.rounds) != 1 or plan.rounds[0].mode != "incremental":
        raise AssertionError("a live run must be a single incremental round")
    rnd = plan.rounds[0]
    if any(st.kind != "copy" for st in rnd.steps):
        raise AssertionError("a live run must not stage (gather/scatter)")
    src, dst = rnd.src, rnd.dst
    if src.size != dst.size or np.unique(src).size != src.size or np.unique(dst).size != dst.size:
        raise AssertionError("moves must have distinct sources and distinct destinations")
    if src.size and (dst.min() < 1 or dst.max() > n or src.min() < 1 or src.max() > n):
        raise AssertionError("a move leaves the slot range")
    isfree = np.zeros(n + 1, dtype=bool)
    isfree[state.free] = True
    live = np.zeros(n + 1, dtype=bool)
    live[state.pool.slots] = True
    if not np.all(isfree[dst]):
        raise AssertionError("a destination is not free at the start of the run")
    if not np.all(live[src]):
        raise AssertionError("a source is not live")
    ident = np.arange(n + 1, dtype=np.int64)
    expect = ident.copy()
    expect[src] = dst
    if plan.remap.shape != (n + 1,) or not np.array_equal(plan.remap, expect):
        raise AssertionError("remap does not match the moves")
    # The state after the move, checked in O(slots) without re-sorting the rows (gather()
    # validated the state before: ranges, no slot twice in a row, free list the complement).
    # remap is injective on live slots (distinct live slots stay distinct, so no row holds a
    # slot twice afterwards), and the new free list is exactly (free - dst) + src, the
    # complement of the remapped live slots.
    live_after = np.zeros(n + 1, dtype=bool)
    live_after[plan.remap[state.pool.slots]] = True
    if int(live_after.sum()) != int(live.sum()):  # distinct live slots before == after
        raise AssertionError("two live slots map to one")
    fa = np.asarray(plan.free_after, dtype=np.int64)
    if fa.size > 1 and np.any(fa[1:] <= fa[:-1]):
        raise AssertionError("the new free list is not strictly ascending")
    expect_free = isfree.copy()
    expect_free[dst] = False
    expect_free[src] = True
    got_free = np.zeros(n + 1, dtype=bool)
    got_free[fa] = True
    if not np.array_equal(got_free, expect_free) or np.any(got_free & live_after):
        raise AssertionError("the new free list is not (free - destinations) + sources")
    if int(live_after[1:].sum()) + fa.size != n:
        raise AssertionError("the new free list is not the exact complement of the live slots")


@dataclass
class RunResult:
    tokens_moved: int
    bytes_moved: int
    runs_before: int
    runs_after: int
    backend: str


def execute(target: Target, state: _State, plan, settings: DefragSettings) -> RunResult:
    """Copy, synchronise, then swap the indices. Every new index tensor is built before the
    first copy, and every copy writes only slots that are free, so a failure before the swap
    leaves all live data and all indices as they were."""
    import torch

    from kv_defrag import executor

    remap = plan.remap
    rtp, alloc = target.req_to_token_pool, target.allocator
    rtt = rtp.req_to_token
    dev = rtt.device
    # 1. new index tensors (nothing of SGLang's is touched yet)
    new_rows = None
    if state.rows.size and state.sub.shape[1]:
        live = np.arange(state.sub.shape[1])[None, :] < state.lens[:, None]
        new_sub = state.sub.copy()
        new_sub[live] = remap[state.sub[live].astype(np.int64)].astype(np.int32)
        changed = np.any(new_sub != state.sub, axis=1)
        if changed.any():
            new_rows = (torch.as_tensor(state.rows[changed], device=dev), torch.as_tensor(new_sub[changed], device=dev))
    new_vals = []
    changed_nodes, changed_vals = [], []
    for node, vals in zip(state.nodes, state.node_vals):
        nv = remap[vals]
        if not np.array_equal(nv, vals):
            changed_nodes.append(node)
            changed_vals.append(nv)
    if changed_nodes:  # one host->device copy, then one tensor of its own per node
        v0 = changed_nodes[0].value
        flat = torch.as_tensor(np.concatenate(changed_vals), dtype=v0.dtype, device=v0.device)
        for node, piece in zip(changed_nodes, torch.split(flat, [int(v.size) for v in changed_vals])):
            new_vals.append((node, piece.to(dtype=node.value.dtype, device=node.value.device).clone()))
    new_free = torch.as_tensor(plan.free_after, dtype=torch.int64, device=alloc.free_pages.device)
    new_release = alloc.release_pages.new_empty((0,))
    # 2. copies, every layer of every pool on this slot space; then synchronise
    used = settings.backend
    elem = 0
    layers = 0
    for pool in target.kv_pools:
        used, _launches, _note = executor.run_copies(plan, pool.kv_buffer, backend=settings.backend)
        layers += len(pool.kv_buffer)
        elem = pool.kv_buffer[0].element_size()
    executor._sync(target.kv_pools[0].kv_buffer)
    # 3. swap the indices
    if new_rows is not None:
        r, vals = new_rows
        width = vals.shape[1]
        rtt[r, :width] = vals
    for node, nv in new_vals:
        node.value = nv
    alloc.free_pages = new_free
    alloc.release_pages = new_release
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)
    return RunResult(
        plan.tokens_moved, plan.tokens_moved * layers * KV_DIM * elem, plan.frag_before.runs, plan.frag_after.runs, used
    )


# --------------------------------------------------------------------------- the hook


@dataclass
class DefragHook:
    """Per-scheduler state: counters, last error, and whether it is enabled."""

    settings: DefragSettings = field(default_factory=DefragSettings)
    target: Target | None = None
    unsupported: str | None = None
    disabled: str | None = None
    steps: int = 0
    runs: int = 0
    rounds: int = 0
    tokens_moved: int = 0
    bytes_moved: int = 0
    skips: Counter = field(default_factory=Counter)
    last_skip_detail: str | None = None
    last_run: dict | None = None
    on_change: Callable[[DefragHook], None] | None = None
    on_count: Callable[[DefragHook], None] | None = None  # told after every run or counted skip
    next_step: int = 1  # the scheduler step of the next try (step-counted: TP ranks stay in lockstep)
    cursor: dict = field(default_factory=lambda: {"at": 0})  # where the planner's next scan starts
    empty_scans: int = 0  # rows visited by the budgeted scans in a row that found nothing to move
    over_budget: int = 0  # tries longer than settings.stall_budget_ms (all of them)
    over_budget_streak: int = 0  # ... in a row, up to now
    # The hook's own time on the scheduler thread for each try (runs and skips alike; the
    # steps it waits out cost nothing): total, planning (CPU: gather, plan, verify) and copy
    # + index swap, milliseconds, the last STALL_WINDOW tries. status() reports their p50/p99/max.
    stall_ms: deque = field(default_factory=lambda: deque(maxlen=STALL_WINDOW))
    plan_ms: deque = field(default_factory=lambda: deque(maxlen=STALL_WINDOW))
    copy_ms: deque = field(default_factory=lambda: deque(maxlen=STALL_WINDOW))
    ran: deque = field(default_factory=lambda: deque(maxlen=STALL_WINDOW))  # that try moved slots

    @property
    def applied(self) -> bool:
        """Attached to a supported scheduler and not disabled (it may run)."""
        return self.target is not None and self.unsupported is None and self.disabled is None

    def status(self) -> dict[str, Any]:
        """What active.json says: ``defrag_applied`` only once a run has happened in this process.

        Under SGLang's overlap scheduler (the default with EAGLE) the previous batch is in flight
        at nearly every busy step and the hook skips (``defrag_skipped_overlap``); a hook that is
        attached but never ran reports ``defrag_applied: false`` with those counts.
        """
        note = None
        overlap = int(self.skips.get("overlap_batch_in_flight", 0))
        if self.unsupported:
            note = f"defrag hook not attached: {self.unsupported}"
        elif self.disabled:
            note = f"defrag hook disabled after an error: {self.disabled}"
        elif self.runs == 0:
            note = (
                f"defrag hook attached but has not run yet ({self.steps} scheduler step(s) seen, "
                f"{overlap} skipped with an overlap batch in flight, skips {dict(self.skips)})"
            )
        return {
            "defrag_applied": self.applied and self.runs > 0,
            "defrag_attached": self.applied,
            "defrag_skipped_overlap": overlap,
            "defrag_note": note,
            "defrag_hook": f"Scheduler.{HOOK_METHOD}",
            "defrag_runs": self.runs,
            "defrag_rounds": self.rounds,
            "defrag_tokens_moved": self.tokens_moved,
            "defrag_bytes_moved": self.bytes_moved,
            "defrag_steps": self.steps,
            "defrag_skips": dict(self.skips),
            "defrag_last_error": self.disabled,
            "defrag_last_run": self.last_run,
            "defrag_stall_ms": self.stall_summary(),
            "defrag_stall_budget_ms": self.settings.stall_budget_ms,
            "defrag_over_budget": self.over_budget,
            "defrag_settings": dict(self.settings.__dict__),
        }

    def stall_summary(self) -> dict[str, Any]:
        """p50 / p99 / max of the hook's time on the scheduler thread per try (ms; the last
        ``STALL_WINDOW`` tries), and of its planning and copy parts."""
        out: dict[str, Any] = {"tries": len(self.stall_ms), "runs": int(sum(self.ran))}
        ran = [x for x, r in zip(self.stall_ms, self.ran) if r]
        for name, xs in (("total", self.stall_ms), ("plan", self.plan_ms), ("copy", self.copy_ms), ("run", ran)):
            if xs:
                a = np.asarray(xs, dtype=np.float64)
                out[name] = {
                    "p50": round(float(np.percentile(a, 50)), 3),
                    "p99": round(float(np.percentile(a, 99)), 3),
                    "max": round(float(a.max()), 3),
                }
        return out

    def _changed(self) -> None:
        if self.on_change is not None:
            try:
                self.on_change(self)
            except Exception:  # noqa: BLE001 - reporting must never break serving
                log.exception("defrag: status report failed")

    def _counted(self) -> None:
        if self.on_count is not None:
            try:
                self.on_count(self)
            except Exception:  # noqa: BLE001 - reporting must never break serving
                log.exception("defrag: count report failed")

    def step(self) -> str:
        """One scheduler step: maybe run. Returns "ran" or the skip reason. Never raises."""
        if not self.applied:
            return "not_applied"
        self.steps += 1
        if self.steps < self.next_step:
            return "interval"
        import time

        self.next_step = self.steps + self.settings.interval_steps
        self._plan_s = self._copy_s = 0.0
        t0 = time.perf_counter()
        result = "failed"
        try:
            result = self._run()
            return result
        except DefragSkip as skip:
            reason = skip.args[0]
            self.skips[reason] += 1
            if reason == "scan_budget_spent":
                # Empty budgeted scans in a row that visited, together, every row: a whole
                # sweep found nothing to move (converged); else scan on soon.
                self.empty_scans += max(1, skip.args[3] - 1)  # the stop request is revisited
                if self.empty_scans < skip.args[2]:
                    self.next_step = self.steps + min(
                        self.settings.continue_interval_steps, self.settings.interval_steps
                    )
                else:
                    self.empty_scans = 0
            self.last_skip_detail = skip.args[1] if len(skip.args) > 1 else None
            self._counted()
            if reason in ("inconsistent", "unowned_rows"):
                log.warning("defrag skipped (%s): %s", reason, self.last_skip_detail)
            return reason
        except Exception as exc:  # noqa: BLE001 - any failure disables the hook for the process
            self.disabled = f"{type(exc).__name__}: {str(exc)[:300]}"
            log.exception("defrag failed; disabled for this process")
            self._changed()
            return "failed"
        finally:
            took = (time.perf_counter() - t0) * 1e3
            self.stall_ms.append(took)
            self.plan_ms.append(self._plan_s * 1e3)
            self.copy_ms.append(self._copy_s * 1e3)
            self.ran.append(result == "ran")
            self._enforce(took)

    def _enforce(self, took_ms: float) -> None:
        """The stall budget, enforced in the process: ``max_over_budget`` tries in a row over
        ``stall_budget_ms`` disable the hook (a one-off, such as the copy kernel's first
        compile, does not). Each TP rank decides from its own clock, so ranks may stop after
        different runs; every rank's structures stay self-consistent, and a run changes which
        slot holds which token, never a count the scheduler decides from."""
        budget = self.settings.stall_budget_ms
        if not budget or self.disabled:
            return
        if took_ms <= budget:
            self.over_budget_streak = 0
            return
        self.over_budget += 1
        self.over_budget_streak += 1
        if self.over_budget_streak >= self.settings.max_over_budget:
            self.disabled = (
                f"stall over budget: {self.over_budget_streak} tries in a row took more than "
                f"{budget:g} ms on the scheduler thread (last {took_ms:.1f} ms); see defrag_stall_ms"
            )
            log.warning("defrag disabled for this process: %s", self.disabled)
            self._changed()

    def _run(self) -> str:
        import time

        import torch

        t = self.target
        why = t.in_flight()
        if why:
            raise DefragSkip(why)
        if torch.cuda.is_available() and torch.cuda.is_current_stream_capturing():
            raise DefragSkip("cuda_graph_capture")
        dev = t.req_to_token_pool.req_to_token.device
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)
        # Several rounds, each complete in itself: gather (re-read the live state), plan one
        # incremental round whose destinations are all free now, verify, copy, swap. A failure
        # in round k leaves round k's state untouched (rounds 1..k-1 stay applied, each
        # consistent) and disables the hook. Stop on a skip (nothing to move, no gain), after
        # max_rounds_per_run rounds or when max_tokens_per_run slots have moved.
        s = self.settings
        moved, nbytes, rounds, plan_s, copy_s = 0, 0, 0, 0.0, 0.0
        parts = {"gather_ms": 0.0, "make_plan_ms": 0.0, "verify_ms": 0.0}  # planning, split
        runs_before = runs_after = None
        stop, backend = f"max_rounds_per_run={s.max_rounds_per_run}", s.backend
        while rounds < s.max_rounds_per_run:
            if moved >= s.max_tokens_per_run:
                stop = f"max_tokens_per_run={s.max_tokens_per_run}"
                break
            t0 = time.perf_counter()
            state = gather(t)
            tg = time.perf_counter()
            try:
                plan = make_plan(state, s, budget=s.max_tokens_per_run - moved, first=rounds == 0, cursor=self.cursor)
            except DefragSkip as skip:
                self._plan_s += time.perf_counter() - t0
                if rounds == 0:
                    raise
                stop = skip.args[0]
                break
            tp = time.perf_counter()
            verify_plan(state, plan)
            t1 = time.perf_counter()
            parts["gather_ms"] += (tg - t0) * 1e3
            parts["make_plan_ms"] += (tp - tg) * 1e3
            parts["verify_ms"] += (t1 - tp) * 1e3
            self._plan_s += t1 - t0
            res = execute(t, state, plan, s)
            t2 = time.perf_counter()
            self._copy_s += t2 - t1
            rounds += 1
            moved += res.tokens_moved
            nbytes += res.bytes_moved
            plan_s += t1 - t0
            copy_s += t2 - t1
            backend = res.backend
            runs_before = res.runs_before if runs_before is None else runs_before
            runs_after = res.runs_after
            self.rounds += 1
            self.tokens_moved += res.tokens_moved
            self.bytes_moved += res.bytes_moved
            self.last_run = {
                "step": self.steps,
                "rounds": rounds,
                "tokens_moved": moved,
                "bytes_moved": nbytes,
                "runs_before": runs_before,
                "runs_after": runs_after,
                "stop": None,
                "plan_ms": round(plan_s * 1e3, 3),
                **{k: round(v, 3) for k, v in parts.items()},
                "copy_and_swap_ms": round(copy_s * 1e3, 3),
                "backend": backend,
            }
        self.runs += 1
        self.empty_scans = 0
        self.last_run["stop"] = stop
        if stop.startswith(("max_tokens_per_run", "max_rounds_per_run")):  # more to do: resume soon
            self.next_step = self.steps + min(s.continue_interval_steps, s.interval_steps)
        self._changed()
        return "ran"


# --------------------------------------------------------------------------- scheduler adapter


def _disagg_null(sched: Any) -> bool:
    mode = getattr(sched, "disaggregation_mode", None)
    if mode is None:
        return True
    return str(getattr(mode, "name", mode)).lower() == "null" or getattr(mode, "value", None) == "null"


def _runners(root: Any, max_depth: int = 3, limit: int = 5000) -> list:
    """Objects under ``root`` (SGLang objects only, no modules/tensors) that own a KV pool and
    an allocator: model runners of the target and of draft workers."""
    import torch

    found, seen, frontier = [], set(), [root]
    names = (
        "model_runner",
        "draft_runner",
        "draft_model_runner",
        "target_worker",
        "draft_worker",
        "draft_runner_list",
        "worker",
    )
    for _ in range(max_depth + 1):
        nxt = []
        for obj in frontier:
            if obj is None or id(obj) in seen or len(seen) > limit:
                continue
            seen.add(id(obj))
            if isinstance(obj, (list, tuple)):
                nxt.extend(obj)
                continue
            if isinstance(obj, (torch.Tensor, torch.nn.Module)) or not type(obj).__module__.startswith("sglang"):
                continue
            if hasattr(obj, "token_to_kv_pool") and hasattr(obj, "token_to_kv_pool_allocator"):
                found.append(obj)
            d = getattr(obj, "__dict__", {})
            nxt.extend(v for v in d.values() if isinstance(v, (list, tuple)) or type(v).__module__.startswith("sglang"))
            for n in names:
                if n not in d:
                    try:
                        v = getattr(type(obj), n, None)
                        if isinstance(v, property):
                            nxt.append(getattr(obj, n))
                    except Exception:  # noqa: BLE001 - a property that cannot be read: ignore
                        pass
        frontier = nxt
    return found


def kv_pools_of(sched: Any, allocator: Any) -> list:
    """Every KV pool on the allocator's slot space: the allocator's own, and each model runner's
    (target and draft workers) whose allocator is this one."""
    pools = [allocator.get_kvcache()]
    for root in (getattr(sched, "tp_worker", None), getattr(sched, "draft_worker", None)):
        for r in _runners(root):
            if r.token_to_kv_pool_allocator is allocator and r.token_to_kv_pool is not None:
                pools.append(r.token_to_kv_pool)
    out, ids = [], set()
    for p in pools:
        if id(p) not in ids:
            ids.add(id(p))
            out.append(p)
    return out


def owners_of(sched: Any) -> list:
    """KV records that own req_to_token rows: SGLang's invariant checker's definition (last
    batch, running batch, parked chunked request) plus the tree cache's session records."""
    checker = getattr(sched, "invariant_checker", None)
    fn = getattr(checker, "_requests_owning_rows", None)
    if fn is not None:
        reqs = fn()
    else:  # same definition, for a scheduler built without the checker
        last, running = getattr(sched, "last_batch", None), getattr(sched, "running_batch", None)
        reqs = [] if last is None else list(last.reqs)
        if running is not None and running is not last:
            reqs += list(running.reqs)
        if getattr(sched, "chunked_req", None) is not None:
            reqs.append(sched.chunked_req)
    kvs, ids = [], set()
    for req in reqs:
        if getattr(req, "beam_group", None) is not None:
            raise DefragSkip("beam_search")
        if req.kv.holds_kv and id(req.kv) not in ids:
            ids.add(id(req.kv))
            kvs.append(req.kv)
    sessions = getattr(sched.tree_cache, "session_records", None)
    for kv in (sessions() if sessions else {}).values():
        if kv.holds_kv and id(kv) not in ids:
            ids.add(id(kv))
            kvs.append(kv)
    return kvs


def _in_flight(sched: Any) -> str | None:
    if getattr(sched, "enable_overlap", False) and len(getattr(sched, "result_queue", ()) or ()):
        return "overlap_batch_in_flight"
    return None


def target_of(sched: Any) -> Target:
    """The scheduler's structures, or :class:`DefragUnsupported` with the reason."""
    args = getattr(sched, "server_args", None)
    checks = [
        (not _disagg_null(sched), "PD disaggregation is on"),
        (bool(getattr(sched, "enable_pdmux", False)), "PD multiplexing is on"),
        (bool(getattr(sched, "enable_overlap_mlx", False)), "MLX overlap loop"),
        (int(getattr(args, "pp_size", 1) or 1) > 1, "pipeline parallelism (batches stay in flight)"),
        (bool(getattr(args, "enable_pd_role_switch", False)), "PD role switch"),
        (bool(getattr(sched, "enable_hierarchical_cache", False)), "hierarchical cache (host copies keyed by slot)"),
        (bool(getattr(sched, "enable_unified_memory", False)), "unified memory pool"),
        (bool(getattr(sched, "is_hybrid_swa", False)), "hybrid SWA model"),
        (bool(getattr(sched, "is_hybrid_ssm", False)), "hybrid SSM model"),
        (getattr(sched, "page_size", 1) != 1, f"page_size is {getattr(sched, 'page_size', None)}, only 1 is supported"),
    ]
    for bad, why in checks:
        if bad:
            raise DefragUnsupported(why)
    alloc = sched.token_to_kv_pool_allocator
    pools = kv_pools_of(sched, alloc)
    check_structures(sched.req_to_token_pool, alloc, sched.tree_cache, pools)
    return Target(
        sched.req_to_token_pool,
        alloc,
        sched.tree_cache,
        pools,
        owners=lambda: owners_of(sched),
        in_flight=lambda: _in_flight(sched),
    )


def _report(hook: DefragHook) -> None:
    from sglang_verify_plugin.config import record_defrag, set_defrag_status

    set_defrag_status(**hook.status())
    record_defrag(requested=True)


def _report_counts(hook: DefragHook) -> None:
    """After a run or a skip: new counters for this process's record, written by the plugin's
    background flusher (no file I/O on the scheduler thread)."""
    from sglang_verify_plugin.config import mark_dirty, set_defrag_status, start_flusher

    set_defrag_status(**hook.status())
    start_flusher()
    mark_dirty()


def attach(sched: Any, settings: DefragSettings, report: Callable[[DefragHook], None] | None = _report) -> DefragHook:
    """Create (once) the hook state for ``sched`` and report it (active.json)."""
    hook = sched.__dict__.get(STATE_ATTR)
    if hook is not None:
        return hook
    hook = DefragHook(settings=settings, on_change=report, on_count=_report_counts if report is _report else None)
    try:
        hook.target = target_of(sched)
        log.info(
            "KV defrag hook attached (%d KV pool(s), every %d steps)",
            len(hook.target.kv_pools),
            settings.interval_steps,
        )
    except DefragUnsupported as exc:
        hook.unsupported = str(exc)
        log.warning("KV defrag hook not attached: %s", exc)
    except Exception as exc:  # noqa: BLE001 - never break the scheduler
        hook.unsupported = f"could not inspect the scheduler: {type(exc).__name__}: {exc}"
        log.exception("KV defrag hook not attached")
    sched.__dict__[STATE_ATTR] = hook
    hook._changed()
    return hook


def wrap(
    original: Callable, settings: DefragSettings, report: Callable[[DefragHook], None] | None = _report
) -> Callable:
    @functools.wraps(original)
    def get_next_batch_to_run(self, *args: Any, **kwargs: Any) -> Any:
        try:
            attach(self, settings, report).step()
        except Exception:  # noqa: BLE001 - the scheduler step must go on whatever happens here
            log.exception("defrag hook error")
        return original(self, *args, **kwargs)

    get_next_batch_to_run.__wrapped__ = original
    setattr(get_next_batch_to_run, _MARK, True)
    return get_next_batch_to_run


def install(
    settings: DefragSettings | None = None,
    scheduler_cls: Any = None,
    report: Callable[[DefragHook], None] | None = _report,
) -> Any:
    """Wrap ``scheduler_cls.get_next_batch_to_run`` (SGLang's ``Scheduler`` by default).
    Idempotent; raises AttributeError loudly when the method does not exist (an SGLang
    release that renamed it). Returns the class."""
    if scheduler_cls is None:
        import importlib

        scheduler_cls = importlib.import_module(SCHEDULER_MODULE).Scheduler
    current = scheduler_cls.__dict__.get(HOOK_METHOD)
    if current is None:
        raise AttributeError(
            f"{scheduler_cls.__module__}.{scheduler_cls.__name__} has no method {HOOK_METHOD!r}: "
            "the defrag hook's installation point is gone (SGLang changed)"
        )
    if getattr(current, _MARK, False):
        return scheduler_cls
    setattr(scheduler_cls, HOOK_METHOD, wrap(current, settings or DefragSettings(), report))
    return scheduler_cls


def uninstall(scheduler_cls: Any = None) -> bool:
    """Restore the original method (tests; a live service just restarts)."""
    if scheduler_cls is None:
        import sys

        mod = sys.modules.get(SCHEDULER_MODULE)
        if mod is None:
            return False
        scheduler_cls = mod.Scheduler
    current = scheduler_cls.__dict__.get(HOOK_METHOD)
    if current is None or not getattr(current, _MARK, False):
        return False
    setattr(scheduler_cls, HOOK_METHOD, current.__wrapped__)
    return True


def installed(scheduler_cls: Any) -> bool:
    return bool(getattr(scheduler_cls.__dict__.get(HOOK_METHOD), _MARK, False))
