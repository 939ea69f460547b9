"""The KV defrag hook against the REAL sglang 0.5.23 structures, on CPU.

Built for real: ``ReqToTokenPool``, ``MLATokenToKVPool`` (device="cpu"; bf16 and fp8 stored as
uint8), ``TokenToKVPoolAllocator`` (need_sort=True, the release list included), ``RadixCache``
with prefixes inserted, matched, locked and evicted through its own API, ``ReqKvInfo`` records,
SGLang's ``SchedulerInvariantChecker._requests_owning_rows`` as the owner census, and a subclass
of SGLang's ``Scheduler`` for the wrapper. Stand-ins (and why): a running batch is a namespace
with ``.reqs`` (a ``ScheduleBatch`` needs a model config and a device batch), and each request is
a namespace holding a real ``ReqKvInfo`` (``Req`` needs a tokenizer-side setup; the hook only
reads ``req.kv`` and ``req.beam_group``). The Scheduler subclass is built with ``__new__`` and
the attributes the hook reads, because a real ``Scheduler.__init__`` loads a model.
``setproctitle`` (not in tests/integration/requirements-sglang.txt) is shimmed by an empty
module only if missing: SGLang's scheduler module imports it and calls it only in the spawned
scheduler process.
"""

from __future__ import annotations

import json
import sys
import types
from array import array
from types import SimpleNamespace

import numpy as np
import pytest

pytestmark = pytest.mark.sglang

SLOTS = 6000
LAYERS = 3


@pytest.fixture(scope="module")
def sgl(sglang_ready):
    try:
        import setproctitle  # noqa: F401
    except ImportError:
        sys.modules["setproctitle"] = types.ModuleType("setproctitle")
    # Read through locals() below: keep every import (ruff's unused-import fix removed them once).
    import torch  # noqa: F401
    from sglang.srt.disaggregation.utils import DisaggregationMode  # noqa: F401
    from sglang.srt.managers.schedule_batch import ReqKvInfo  # noqa: F401
    from sglang.srt.managers.scheduler import Scheduler  # noqa: F401
    from sglang.srt.managers.scheduler_components.invariant_checker import SchedulerInvariantChecker  # noqa: F401
    from sglang.srt.mem_cache.allocator.token import TokenToKVPoolAllocator  # noqa: F401
    from sglang.srt.mem_cache.base_prefix_cache import EvictParams, InsertParams, MatchPrefixParams  # noqa: F401
    from sglang.srt.mem_cache.cache_init_params import CacheInitParams  # noqa: F401
    from sglang.srt.mem_cache.memory_pool import MLATokenToKVPool, ReqToTokenPool  # noqa: F401
    from sglang.srt.mem_cache.radix_cache import RadixCache, RadixKey  # noqa: F401

    return SimpleNamespace(**locals())


class World:
    """Real SGLang pools churned into a fragmented state; ``live`` = requests holding rows."""

    def __init__(self, sgl, dtype=None, slots=SLOTS, layers=LAYERS, seed=0, extra_pools=0, max_context=1024):
        torch = sgl.torch
        self.sgl = sgl
        dtype = dtype or torch.bfloat16
        self.rtp = sgl.ReqToTokenPool(size=64, max_context_len=max_context, device="cpu", enable_memory_saver=False)

        def mk():
            return sgl.MLATokenToKVPool(
                size=slots,
                page_size=1,
                dtype=dtype,
                kv_lora_rank=512,
                qk_rope_head_dim=64,
                layer_num=layers,
                device="cpu",
                enable_memory_saver=False,
            )

        self.pool = mk()
        self.extra = [mk() for _ in range(extra_pools)]  # e.g. a draft model's pool on the same slots
        self.alloc = sgl.TokenToKVPoolAllocator(
            size=slots, dtype=dtype, device="cpu", kvcache=self.pool, need_sort=True
        )
        self.tree = sgl.RadixCache(
            sgl.CacheInitParams(
                disable=False, req_to_token_pool=self.rtp, token_to_kv_pool_allocator=self.alloc, page_size=1
            )
        )
        g = torch.Generator().manual_seed(seed)
        for p in [self.pool] + self.extra:  # every slot of every layer gets distinct random bytes
            for buf in p.kv_buffer:
                buf.view(torch.uint8).copy_(
                    torch.randint(0, 256, buf.view(torch.uint8).shape, generator=g, dtype=torch.uint8)
                )
        self.rng = np.random.default_rng(seed)
        self.live: list = []
        self.keys: list = []  # token keys inserted into the tree
        self.churn()
        # The churn above emulates the scheduler with SGLang's own calls; check that it left
        # the accounting exact, so a failure below is the hook's and not the emulation's.
        # (Seed 5 of this emulation leaves 5 slots unaccounted for; the hook then refuses to
        # run with "leaked slots", which test_inconsistent_states_are_skipped_and_counted covers.)
        free = self.alloc.get_all_free_pages()
        assert self.live_slots().numel() + free.numel() == slots, "test world: slot accounting broken"

    # -- a tiny scheduler: admit (sometimes with a cached prefix), decode interleaved, finish
    def admit(self, n_tokens, prefix_key=None):
        sgl, torch = self.sgl, self.sgl.torch
        row = self.rtp.alloc_rows(1)[0]
        tokens = array("q", self.rng.integers(1, 50000, n_tokens).tolist())
        kv = sgl.ReqKvInfo(req_pool_idx=row)
        req = SimpleNamespace(kv=kv, tokens=tokens, beam_group=None, node=None)
        if prefix_key is not None:
            tokens[: len(prefix_key)] = prefix_key
            m = self.tree.match_prefix(sgl.MatchPrefixParams(key=sgl.RadixKey(tokens)))
            pre = self.tree.path_device_indices(m.last_device_node)
            self.rtp.write((row, slice(0, len(pre))), pre.to(torch.int32))
            self.tree.inc_lock_ref(m.last_device_node)
            req.node = m.last_device_node
            kv.cache_protected_len = kv.kv_allocated_len = kv.kv_committed_len = len(pre)
        self.live.append(req)
        return req

    def extend(self, req, k):
        loc = self.alloc.alloc(k)
        assert loc is not None, "pool exhausted"
        a = req.kv.kv_allocated_len
        self.rtp.write((req.kv.req_pool_idx, slice(a, a + k)), loc.to(self.sgl.torch.int32))
        req.kv.kv_allocated_len = req.kv.kv_committed_len = a + k

    def finish(self, req, cache=True):
        sgl, torch = self.sgl, self.sgl.torch
        n = req.kv.kv_allocated_len
        idx = self.rtp.req_to_token[req.kv.req_pool_idx, :n].to(torch.int64)
        if cache:
            key = req.tokens[:n]
            res = self.tree.insert(sgl.InsertParams(key=sgl.RadixKey(key), value=idx.clone()))
            self.alloc.free(idx[req.kv.cache_protected_len : res.prefix_len])  # duplicates of tree slots
            self.keys.append(array("q", key))
        else:
            self.alloc.free(idx[req.kv.cache_protected_len :])
        if req.node is not None:
            self.tree.dec_lock_ref(req.node)
        self.rtp.free_rows([req.kv.req_pool_idx])
        req.kv.req_pool_idx = None
        self.live.remove(req)

    def churn(self, rounds=30):
        for i in range(rounds):
            while len(self.live) < 12:
                pre = None
                if self.keys and self.rng.random() < 0.3:
                    k = self.keys[int(self.rng.integers(len(self.keys)))]
                    pre = k[: max(1, len(k) // 2)]
                req = self.admit(int(self.rng.integers(40, 200)), pre)
                self.extend(req, int(self.rng.integers(1, 24)))  # "prefill" chunk
            for req in list(self.live):  # decode: every request takes 1-4 slots per step
                if req.kv.kv_allocated_len < len(req.tokens):
                    self.extend(req, min(int(self.rng.integers(1, 5)), len(req.tokens) - req.kv.kv_allocated_len))
            for req in list(self.live):
                if req.kv.kv_allocated_len >= len(req.tokens) or self.rng.random() < 0.05:
                    self.finish(req, cache=self.rng.random() < 0.7)
            if i % 7 == 6:
                self.tree.evict(self.sgl.EvictParams(num_tokens=150))
        for _ in range(4):  # leave requests mid-flight, interleaved
            for req in list(self.live):
                if req.kv.kv_allocated_len < len(req.tokens):
                    self.extend(req, 1)

    def owners(self):
        return [r.kv for r in self.live]

    def target(self):
        from sglang_verify_plugin.defrag_hook import Target

        return Target(self.rtp, self.alloc, self.tree, [self.pool] + self.extra, owners=self.owners)

    # -- observations
    def req_rows(self):
        torch = self.sgl.torch
        return {
            id(r): self.rtp.req_to_token[r.kv.req_pool_idx, : r.kv.kv_allocated_len].to(torch.int64).clone()
            for r in self.live
        }

    def key_paths(self):
        out = []
        for k in self.keys:
            m = self.tree.match_prefix(self.sgl.MatchPrefixParams(key=self.sgl.RadixKey(k)))
            out.append((m.device_prefix_len, self.tree.path_device_indices(m.last_device_node).clone()))
        return out

    def read(self, idx):
        return [torch_stack([buf[idx] for buf in p.kv_buffer]) for p in [self.pool] + self.extra]

    def snapshot(self):
        torch = self.sgl.torch
        return {
            "rtt": self.rtp.req_to_token.clone(),
            "free": self.alloc.get_all_free_pages().clone(),
            "tree": [(id(n), n.value.clone()) for n in _nodes(self.tree)],
            "kv": [[b.clone() for b in p.kv_buffer] for p in [self.pool] + self.extra],
            "rows": self.req_rows(),
            "paths": self.key_paths(),
            "_t": torch,
        }

    def live_slots(self):
        torch = self.sgl.torch
        parts = [v for v in self.req_rows().values()] + [n.value for n in _nodes(self.tree)]
        return torch.unique(torch.cat(parts)) if parts else torch.zeros(0, dtype=torch.int64)

    def runs_per_request(self):
        runs = 0
        for v in self.req_rows().values():
            runs += 1 + int((v[1:] != v[:-1] + 1).sum()) if len(v) else 0
        return runs / max(1, len(self.live))


def _same(a, b):
    """Byte equality (random bf16 bytes include NaNs, which torch.equal treats as unequal)."""
    import torch

    return a.shape == b.shape and torch.equal(a.contiguous().view(torch.uint8), b.contiguous().view(torch.uint8))


def torch_stack(xs):
    import torch

    return torch.stack(xs)


def _nodes(tree):
    out, stack = [], list(tree.root_node.children.values())
    while stack:
        n = stack.pop()
        if n.value is not None:
            out.append(n)
        stack.extend(n.children.values())
    return out


def _settings(**kw):
    from sglang_verify_plugin.defrag_hook import DefragSettings

    # stall_budget_ms=0: these tests check data and indices, not this shared CPU's timing (the
    # enforcement has its own test below)
    base = dict(
        interval_steps=1,
        min_runs_per_row=1.0,
        min_live_tokens=0,
        max_tokens_per_run=1 << 30,
        backend="torch",
        stall_budget_ms=0,
    )
    base.update(kw)
    return DefragSettings(**base)


def _hook(world, **kw):
    from sglang_verify_plugin.defrag_hook import DefragHook

    return DefragHook(settings=_settings(**kw), target=world.target())


def _assert_preserved(world, before):
    """Every live request's and cached prefix's bytes, read through today's indices, equal
    what they read before, in every layer of every pool; the tree still matches the same keys."""
    rows_after = world.req_rows()
    assert rows_after.keys() == before["rows"].keys()
    for rid, old in before["rows"].items():
        new = rows_after[rid]
        for p_old, p_new in zip(before["kv"], [[*p.kv_buffer] for p in [world.pool] + world.extra]):
            for l_old, l_new in zip(p_old, p_new):
                assert _same(l_new[new], l_old[old]), "a live request's KV changed"
    for (plen_old, old), (plen_new, new) in zip(before["paths"], world.key_paths()):
        assert plen_new == plen_old, "match_prefix length changed"
        for p_old, p_new in zip(before["kv"], [[*p.kv_buffer] for p in [world.pool] + world.extra]):
            for l_old, l_new in zip(p_old, p_new):
                assert _same(l_new[new], l_old[old]), "a cached prefix's KV changed"


def _assert_slots_consistent(world, before):
    torch = world.sgl.torch
    # one new slot per old slot and vice versa: no slot has two owners
    pairs = {}
    back = {}
    for rid, old in before["rows"].items():
        for o, n in zip(old.tolist(), world.req_rows()[rid].tolist()):
            assert pairs.setdefault(o, n) == n, f"old slot {o} went to two places"
            assert back.setdefault(n, o) == o, f"slot {n} now holds two tokens"
    for (_, old), (_, new) in zip(before["paths"], world.key_paths()):
        for o, n in zip(old.tolist(), new.tolist()):
            assert pairs.setdefault(o, n) == n and back.setdefault(n, o) == o
    live = world.live_slots()
    free = world.alloc.get_all_free_pages()
    assert torch.unique(free).numel() == free.numel(), "free list holds a slot twice"
    assert not torch.isin(free, live).any(), "a slot is both free and live"
    assert live.numel() + free.numel() == world.alloc.size, "free list is not the exact complement"
    assert live.min() >= 1


@pytest.mark.parametrize("dtype_name", ["bfloat16", "float8_e4m3fn"])
def test_hook_relocates_real_sglang_pools_and_preserves_every_token(sgl, dtype_name):
    world = World(sgl, dtype=getattr(sgl.torch, dtype_name), extra_pools=1)
    assert world.keys and len(world.live) >= 6 and any(r.kv.cache_protected_len for r in world.live)
    before = world.snapshot()
    frag_before = world.runs_per_request()
    hook = _hook(world)
    results = [hook.step() for _ in range(6)]  # successive runs continue where the last stopped
    assert results[0] == "ran", (results, hook.skips, hook.last_skip_detail)
    assert hook.runs >= 1 and hook.tokens_moved > 0 and hook.disabled is None
    _assert_preserved(world, before)
    _assert_slots_consistent(world, before)
    assert world.runs_per_request() < frag_before, (frag_before, world.runs_per_request())
    assert world.alloc.release_pages.numel() == 0
    # the allocator still works: SGLang can allocate and the tree can evict everything
    assert world.alloc.alloc(5) is not None
    st = hook.status()
    assert st["defrag_applied"] is True and st["defrag_runs"] == hook.runs
    assert st["defrag_tokens_moved"] == hook.tokens_moved > 0


def test_cap_per_run_moves_at_most_max_tokens_and_stays_consistent(sgl):
    world = World(sgl, seed=3)
    before = world.snapshot()
    hook = _hook(world, max_tokens_per_run=37)
    assert hook.step() == "ran"
    assert hook.tokens_moved <= 37
    _assert_preserved(world, before)
    _assert_slots_consistent(world, before)


class HeavyWorld(World):
    """The shape the single whole-gap round could not touch (docs/kernels/kv-defrag-results.md): a dozen
    long requests decoded in lockstep (1-4 slots each per step, so their slots interleave),
    finished ones cached in the tree, the tree evicted whenever the pool fills, for three pool
    fills of allocations; then load drops and the tree is evicted until a third of the pool is
    free. Free space ends up in extents of a few slots; no request fits one."""

    def churn(self):
        sgl, rng = self.sgl, self.rng
        slots = self.alloc.size
        allocated = 0
        while allocated < 3 * slots:
            while len(self.live) < 12:
                pre = None
                if self.keys and rng.random() < 0.3:
                    k = self.keys[int(rng.integers(len(self.keys)))]
                    pre = k[: max(1, len(k) // 2)]
                self.admit(int(rng.integers(200, 900)), pre)
            need = [min(int(rng.integers(1, 5)), len(r.tokens) - r.kv.kv_allocated_len) for r in self.live]
            if self.alloc.available_size() < sum(need) + 1:
                self.tree.evict(sgl.EvictParams(num_tokens=sum(need) + slots // 20))
                if self.alloc.available_size() < sum(need) + 1:
                    self.finish(max(self.live, key=lambda r: r.kv.kv_allocated_len), cache=False)
                    continue
            for req, k in zip(list(self.live), need):
                if k:
                    self.extend(req, k)
                    allocated += k
            for req in list(self.live):
                if req.kv.kv_allocated_len >= len(req.tokens) or rng.random() < 0.002:
                    self.finish(req, cache=rng.random() < 0.7)
        short = slots // 3 - self.alloc.available_size()
        if short > 0:
            self.tree.evict(sgl.EvictParams(num_tokens=short))


HEAVY_SLOTS = 12000


def test_heavily_fragmented_mostly_full_pool_drops_runs_per_request_20x(sgl):
    """Several split rounds per hook run defragment a pool where one whole-gap round moved nothing."""
    from kv_defrag.planner import fragmentation, plan_defrag
    from sglang_verify_plugin.defrag_hook import gather

    world = HeavyWorld(sgl, slots=HEAVY_SLOTS, layers=2, seed=0, extra_pools=1)
    state = gather(world.target())
    fb = fragmentation(state.pool)
    free_frac = world.alloc.available_size() / HEAVY_SLOTS
    rpr0 = world.runs_per_request()
    assert 0.25 <= free_frac <= 0.45 and fb.mean_run_length < 3 and rpr0 > 100, (free_frac, fb, rpr0)
    assert fb.largest_free_extent < 64
    # what the hook did before (one incremental round of whole gaps) barely moves anything here
    old = plan_defrag(state.pool, max_rounds=1, compact=False)
    assert old.tokens_moved < 0.01 * fb.live_tokens and old.frag_after.runs > 0.99 * fb.runs
    before = world.snapshot()
    hook = _hook(world, max_tokens_per_run=1 << 16, max_rounds_per_run=8)
    results = [hook.step() for _ in range(6)]
    assert results[0] == "ran" and hook.disabled is None, (results, hook.skips, hook.last_skip_detail)
    assert hook.rounds > hook.runs  # several rounds per run
    rpr1 = world.runs_per_request()
    assert rpr1 * 20 <= rpr0, (rpr0, rpr1)
    _assert_preserved(world, before)  # every live and cached token, every layer of both pools
    _assert_slots_consistent(world, before)  # bijection, free list the exact complement
    assert world.alloc.release_pages.numel() == 0 and world.alloc.alloc(5) is not None
    st = hook.status()
    assert st["defrag_rounds"] == hook.rounds and st["defrag_tokens_moved"] == hook.tokens_moved > 0
    print(
        f"heavy pool: runs/request {rpr0:.1f} -> {rpr1:.2f}, tokens moved {hook.tokens_moved}, "
        f"runs {hook.runs}, rounds {hook.rounds}, free {free_frac:.3f}, results {results}"
    )


def test_failure_in_a_later_round_keeps_earlier_rounds_and_leaves_that_round_untouched(sgl, monkeypatch):
    """Round 3 of a run fails mid-copy: rounds 1-2 stay applied (consistent, every token
    preserved), round 3 wrote only free slots and swapped nothing; the hook is disabled."""
    from kv_defrag import executor

    world = HeavyWorld(sgl, slots=HEAVY_SLOTS // 2, layers=2, seed=1, extra_pools=1)
    before = world.snapshot()
    real = executor.run_copies
    calls = {"n": 0}
    state = {}

    def fail_in_round_3(plan, kv, **kw):  # 2 pools per round: call 5 = round 3, first pool
        calls["n"] += 1
        if calls["n"] == 5:
            state["mid"] = world.snapshot()  # the state after round 2, before round 3 copies
            raise RuntimeError("injected copy failure in round 3")
        return real(plan, kv, **kw)

    monkeypatch.setattr(executor, "run_copies", fail_in_round_3)
    hook = _hook(world, max_rounds_per_run=8)
    assert hook.step() == "failed" and "round 3" in hook.disabled
    assert hook.rounds == 2 and hook.tokens_moved > 0
    _assert_identical(world, state["mid"])  # round 3 left everything as round 2 did
    _assert_preserved(world, before)
    _assert_slots_consistent(world, before)
    assert hook.step() == "not_applied"


def _assert_identical(world, before, free_slot_bytes_too=True):
    torch = world.sgl.torch
    assert torch.equal(world.rtp.req_to_token, before["rtt"])
    assert torch.equal(world.alloc.get_all_free_pages(), before["free"])
    now = [(id(n), n.value) for n in _nodes(world.tree)]
    assert [i for i, _ in now] == [i for i, _ in before["tree"]]
    assert all(torch.equal(a, b) for (_, a), (_, b) in zip(now, before["tree"]))
    free = before["free"]
    for p_old, p in zip(before["kv"], [world.pool] + world.extra):
        for l_old, l_new in zip(p_old, p.kv_buffer):
            if free_slot_bytes_too:
                assert _same(l_new, l_old)
            else:  # the copies wrote only into free slots
                keep = torch.ones(l_new.shape[0], dtype=torch.bool)
                keep[free] = False
                assert _same(l_new[keep], l_old[keep])


@pytest.mark.parametrize("where", ["plan", "verify", "copy"])
def test_failure_injection_leaves_sglang_structures_untouched(sgl, monkeypatch, where):
    from kv_defrag import executor
    from sglang_verify_plugin import defrag_hook

    world = World(sgl, seed=1, extra_pools=1)
    before = world.snapshot()
    if where == "plan":

        def boom(*a, **k):
            raise RuntimeError("injected planner failure")

        monkeypatch.setattr("kv_defrag.planner.plan_defrag", boom)
    elif where == "verify":
        real = defrag_hook.make_plan

        def bad_plan(state, settings, **kw):  # a plan whose first destination is a live slot
            plan = real(state, settings, **kw)
            plan.rounds[0].dst[0] = int(state.pool.slots[0])
            return plan

        monkeypatch.setattr(defrag_hook, "make_plan", bad_plan)
    else:
        real_copies = executor.run_copies
        calls = {"n": 0}

        def copies_then_fail(plan, kv, **kw):  # first pool fully copied, then the second fails
            calls["n"] += 1
            if calls["n"] == 2:
                raise RuntimeError("injected copy failure")
            return real_copies(plan, kv, **kw)

        monkeypatch.setattr(executor, "run_copies", copies_then_fail)
    reports = []
    hook = _hook(world)
    hook.on_change = lambda h: reports.append(h.status())
    assert hook.step() == "failed"
    assert hook.disabled and (
        "injected" in hook.disabled if where != "verify" else "destination is not free" in hook.disabled
    ), hook.disabled
    assert hook.applied is False and reports and reports[-1]["defrag_applied"] is False
    assert reports[-1]["defrag_last_error"] == hook.disabled
    _assert_identical(world, before, free_slot_bytes_too=(where != "copy"))
    _assert_preserved(world, before)
    assert hook.step() == "not_applied"  # disabled for the process


def test_inconsistent_states_are_skipped_and_counted(sgl):
    torch = sgl.torch
    world = World(sgl, seed=2)
    hook = _hook(world)
    # a row handed out to an owner the hook cannot see
    stray = world.rtp.alloc_rows(1)
    before = world.snapshot()
    assert hook.step() == "unowned_rows"
    _assert_identical(world, before)
    world.rtp.free_rows(stray)
    # a leaked slot: neither free nor owned
    leaked = world.alloc.alloc(1)
    before = world.snapshot()
    assert hook.step() == "inconsistent" and "leaked" in hook.last_skip_detail
    _assert_identical(world, before)
    world.alloc.free(leaked)
    # an open free group
    world.alloc.free_group_begin()
    assert hook.step() == "free_group_open"
    world.alloc.free_group_end()
    # overlap mode with a batch in flight
    hook.target.in_flight = lambda: "overlap_batch_in_flight"
    assert hook.step() == "overlap_batch_in_flight"
    hook.target.in_flight = lambda: None
    assert dict(hook.skips) == {
        "unowned_rows": 1,
        "inconsistent": 1,
        "free_group_open": 1,
        "overlap_batch_in_flight": 1,
    }
    assert hook.step() == "ran" and hook.disabled is None
    assert torch.unique(world.alloc.get_all_free_pages()).numel() == world.alloc.get_all_free_pages().numel()


def test_threshold_and_interval_rate_limit(sgl):
    world = World(sgl, seed=4)
    hook = _hook(world, min_runs_per_row=1e9)
    assert hook.step() == "below_threshold"
    hook = _hook(world, interval_steps=3)
    assert [hook.step() for _ in range(4)][1:3] == ["interval", "interval"]


def test_budgeted_runs_stay_within_budget_resume_soon_and_preserve_every_token(sgl):
    """The stall bound: each run (one scheduler step) moves at most max_tokens_per_run slots;
    while work remains the next run comes continue_interval_steps later, not interval_steps;
    the hook's own time per try is reported (total / plan / copy); over many budgeted runs
    every live and cached token survives and fragmentation drops."""
    world = HeavyWorld(sgl, slots=HEAVY_SLOTS // 2, layers=2, seed=2, extra_pools=1)
    before = world.snapshot()
    rpr0 = world.runs_per_request()
    hook = _hook(world, max_tokens_per_run=50, max_attempts_per_run=64, interval_steps=16, continue_interval_steps=2)
    results, moved = [], []
    for _ in range(60):
        t0 = hook.tokens_moved
        results.append(hook.step())
        moved.append(hook.tokens_moved - t0)
    assert hook.disabled is None, hook.disabled
    assert results[0] == "ran" and results[1] == "interval" and results[2] == "ran", results[:4]
    assert max(moved) <= 50 and sum(moved) == hook.tokens_moved > 0
    assert hook.runs >= 20  # resumed every 2 steps, not every 16
    st = hook.status()["defrag_stall_ms"]
    assert st["tries"] == sum(r != "interval" for r in results) and st["runs"] == hook.runs
    assert 0 < st["total"]["p50"] <= st["total"]["p99"] <= st["total"]["max"]
    assert st["plan"]["max"] > 0 and st["copy"]["max"] > 0
    assert hook.last_run["plan_ms"] > 0 and hook.last_run["stop"].startswith("max_")
    _assert_preserved(world, before)
    _assert_slots_consistent(world, before)
    assert world.runs_per_request() < rpr0


def test_scan_budget_resumes_then_waits_the_full_interval_after_a_whole_empty_sweep(sgl):
    """A scan budget too small to place anything: each try stops after one request and the
    next resumes soon, from the next request; once the empty scans have together visited every
    row (a whole sweep found nothing), the hook waits interval_steps again."""
    world = World(sgl, seed=4)
    hook = _hook(world, max_attempts_per_run=1, interval_steps=50, continue_interval_steps=1)
    results = [hook.step() for _ in range(400)]
    tries = [i for i, r in enumerate(results) if r != "interval"]
    assert all(results[i] == "scan_budget_spent" for i in tries), set(results)
    assert hook.tokens_moved == 0 and hook.disabled is None
    gaps = np.diff(tries)
    assert gaps[0] == 1 and 50 in gaps.tolist(), gaps  # resumed at once, then a full interval
    rows = len(world.live) + len(_nodes(world.tree))  # the planner's rows: requests + tree nodes
    first_wait = gaps.tolist().index(50)
    assert first_wait + 1 <= rows, (first_wait, rows)  # at most one empty scan per row


def test_stall_budget_is_enforced_in_the_process(sgl):
    """max_over_budget tries in a row over stall_budget_ms disable the hook with the reason
    (active.json: defrag_last_error, defrag_applied false); tries within budget never do."""
    world = World(sgl, seed=4)
    before = world.snapshot()
    tight = _hook(world, stall_budget_ms=1e-6, max_over_budget=3, max_tokens_per_run=20, max_attempts_per_run=1 << 20)
    results = [tight.step() for _ in range(6)]
    # three tries (runs or skips: both stall the step), then the hook is off
    assert "not_applied" not in results[:3] and "ran" in results[:3] and results[3:] == ["not_applied"] * 3, results
    assert tight.disabled.startswith("stall over budget: 3 tries in a row") and tight.over_budget == 3
    st = tight.status()
    assert st["defrag_applied"] is False and st["defrag_last_error"] == tight.disabled
    assert st["defrag_over_budget"] == 3 and st["defrag_stall_budget_ms"] == 1e-6
    _assert_preserved(world, before)  # the three runs it made are complete and consistent
    _assert_slots_consistent(world, before)
    roomy = _hook(world, stall_budget_ms=1e9, max_tokens_per_run=20, max_attempts_per_run=1 << 20)
    assert "not_applied" not in [roomy.step() for _ in range(4)]
    assert roomy.disabled is None and roomy.over_budget == 0 and roomy.runs >= 1


# ----------------------------------------------------------------------------- the scheduler


def _scheduler_instance(sgl, world, cls):
    """A Scheduler (subclass) object carrying the attributes the hook reads, with SGLang's real
    invariant checker as the owner census."""
    s = cls.__new__(cls)
    running = SimpleNamespace(reqs=list(world.live))
    s.__dict__.update(
        server_args=SimpleNamespace(pp_size=1, enable_pd_role_switch=False),
        disaggregation_mode=sgl.DisaggregationMode.NULL,
        enable_pdmux=False,
        enable_overlap=False,
        enable_overlap_mlx=False,
        enable_hierarchical_cache=False,
        enable_unified_memory=False,
        is_hybrid_swa=False,
        is_hybrid_ssm=False,
        page_size=1,
        req_to_token_pool=world.rtp,
        token_to_kv_pool_allocator=world.alloc,
        tree_cache=world.tree,
        last_batch=running,
        running_batch=running,
        chunked_req=None,
        tp_worker=None,
        draft_worker=None,
    )
    s.invariant_checker = sgl.SchedulerInvariantChecker(
        is_hybrid_swa=False,
        is_hybrid_ssm=False,
        disaggregation_mode=sgl.DisaggregationMode.NULL,
        page_size=1,
        full_tokens_per_layer=None,
        swa_tokens_per_layer=None,
        max_total_num_tokens=SLOTS,
        tree_cache=world.tree,
        token_to_kv_pool_allocator=world.alloc,
        req_to_token_pool=world.rtp,
        pool_stats_observer=None,
        get_last_batch=lambda: s.last_batch,
        get_running_batch=lambda: s.running_batch,
        scheduler_stage_metrics=None,
        get_chunked_req=lambda: s.chunked_req,
    )
    return s


def test_installation_point_is_the_real_scheduler_method_of_sglang_0_5_23(sgl):
    import inspect

    from sglang_verify_plugin import defrag_hook

    Scheduler = sgl.Scheduler
    original = Scheduler.__dict__.get(defrag_hook.HOOK_METHOD)
    assert callable(original), "sglang's Scheduler lost get_next_batch_to_run: the defrag hook point is gone"
    for loop in ("event_loop_normal", "event_loop_overlap"):  # the point sits between steps in both loops
        src = inspect.getsource(getattr(Scheduler, loop))
        assert "self.get_next_batch_to_run(" in src and "self.run_batch(" in src
        assert src.index("self.get_next_batch_to_run(") < src.index("self.run_batch(")
    assert "self.result_queue" in inspect.getsource(Scheduler.event_loop_overlap)
    try:
        defrag_hook.install(_settings())
        wrapped = Scheduler.__dict__[defrag_hook.HOOK_METHOD]
        assert defrag_hook.installed(Scheduler) and wrapped.__wrapped__ is original
        defrag_hook.install(_settings())  # idempotent
        assert Scheduler.__dict__[defrag_hook.HOOK_METHOD] is wrapped
    finally:
        assert defrag_hook.uninstall(Scheduler)
    assert Scheduler.__dict__[defrag_hook.HOOK_METHOD] is original
    with pytest.raises(AttributeError, match="installation point is gone"):
        defrag_hook.install(_settings(), scheduler_cls=type("Renamed", (), {}))


def test_wrapped_scheduler_step_attaches_runs_and_reports_in_active_json(sgl, tmp_path, monkeypatch):
    from sglang_verify_plugin import defrag_hook

    cfg = tmp_path / "verify_backend.json"
    cfg.write_text(json.dumps({"verify_kernel": "stock", "defrag": True}))
    monkeypatch.setenv("ORCHESTRATOR_VERIFY_CONFIG", str(cfg))
    monkeypatch.setattr("sglang_verify_plugin.config._DEFRAG_STATUS", {})
    monkeypatch.setattr("sglang_verify_plugin.config._LAST_ACTIVE", {})
    calls = []

    class StepScheduler(sgl.Scheduler):  # the real class below; the step itself is recorded
        def get_next_batch_to_run(self, running_batch=None, last_batch=None):
            calls.append((running_batch, last_batch))
            return "batch-plan"

    defrag_hook.install(_settings(), scheduler_cls=StepScheduler)
    world = World(sgl, seed=8)
    before = world.snapshot()
    frag = world.runs_per_request()
    s = _scheduler_instance(sgl, world, StepScheduler)
    assert s.get_next_batch_to_run(running_batch="rb", last_batch="lb") == "batch-plan"
    assert calls == [("rb", "lb")]
    hook = s.__dict__[defrag_hook.STATE_ATTR]
    assert hook.applied and hook.runs == 1, (hook.unsupported, dict(hook.skips), hook.last_skip_detail)
    assert len(hook.target.kv_pools) == 1 and hook.target.kv_pools[0] is world.pool
    _assert_preserved(world, before)
    _assert_slots_consistent(world, before)
    assert world.runs_per_request() < frag
    active = json.loads((tmp_path / "active.json").read_text())
    assert active["defrag_requested"] is True and active["defrag_applied"] is True
    assert active["defrag_runs"] == 1 and active["defrag_tokens_moved"] == hook.tokens_moved > 0
    assert active["defrag_hook"] == "Scheduler.get_next_batch_to_run" and active["defrag_last_error"] is None
    assert active["verify_kernel"] is None  # this process built no attention backend: no kernel claimed
    # overlap mode with the last batch still queued: skipped and counted, the step still runs
    s.enable_overlap, s.result_queue = True, [("batch", "result")]
    s.get_next_batch_to_run()
    assert hook.skips["overlap_batch_in_flight"] == 1 and len(calls) == 2


def test_unsupported_structures_are_reported_not_attached(sgl, tmp_path, monkeypatch):
    from sglang_verify_plugin import defrag_hook

    cfg = tmp_path / "verify_backend.json"
    cfg.write_text(json.dumps({"verify_kernel": "stock", "defrag": True}))
    monkeypatch.setenv("ORCHESTRATOR_VERIFY_CONFIG", str(cfg))
    monkeypatch.setattr("sglang_verify_plugin.config._DEFRAG_STATUS", {})
    world = World(sgl, seed=6)
    rtt = world.rtp.req_to_token.clone()

    class S(sgl.Scheduler):
        def get_next_batch_to_run(self, *a, **k):
            return None

    cases = {
        "page_size": ("page_size", 16, "page_size is 16"),
        "pp": ("server_args", SimpleNamespace(pp_size=2), "pipeline parallelism"),
        "swa": ("is_hybrid_swa", True, "hybrid SWA"),
        "hicache": ("enable_hierarchical_cache", True, "hierarchical cache"),
    }
    for name, (attr, value, why) in cases.items():
        s = _scheduler_instance(sgl, world, S)
        setattr(s, attr, value)
        hook = defrag_hook.attach(s, _settings())
        assert not hook.applied and why in hook.unsupported, (name, hook.unsupported)
        assert hook.step() == "not_applied"
        active = json.loads((tmp_path / "active.json").read_text())
        assert active["defrag_applied"] is False and why in active["defrag_note"]
    # a non-MLA pool on the allocator
    from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool

    try:
        mha = MHATokenToKVPool(
            size=SLOTS,
            page_size=1,
            dtype=sgl.torch.bfloat16,
            head_num=1,
            head_dim=64,
            layer_num=1,
            device="cpu",
            enable_memory_saver=False,
        )
    except Exception as exc:  # noqa: BLE001
        pytest.skip(f"MHATokenToKVPool cannot be built on CPU in sglang 0.5.23: {type(exc).__name__}: {exc}")
    with pytest.raises(defrag_hook.DefragUnsupported, match="MHATokenToKVPool, not MLATokenToKVPool"):
        defrag_hook.check_structures(world.rtp, world.alloc, world.tree, [mha])
    assert sgl.torch.equal(world.rtp.req_to_token, rtt)


def test_plugin_register_installs_the_hook_only_when_defrag_is_on(sgl, tmp_path, monkeypatch):
    import sglang_verify_plugin as plugin
    from sglang_verify_plugin import defrag_hook
    from sglang_verify_plugin.config import DEFRAG_NOT_WIRED, VerifyConfig, record_active

    monkeypatch.setattr("sglang_verify_plugin.config._DEFRAG_STATUS", {})
    monkeypatch.setenv("ORCHESTRATOR_VERIFY_CONFIG", str(tmp_path / "verify_backend.json"))
    off = VerifyConfig("bundled", "a" * 64, False, "test: defrag off")
    try:
        assert plugin.register(lambda: off)
        assert not defrag_hook.installed(sgl.Scheduler)
        record_active(off, route="hook")
        active = json.loads((tmp_path / "active.json").read_text())
        assert active["defrag_requested"] is False and active["defrag_applied"] is False
    finally:
        plugin.unregister()
    on = VerifyConfig("bundled", "a" * 64, True, "test: defrag on")
    try:
        assert plugin.register(lambda: on)
        assert defrag_hook.installed(sgl.Scheduler)
        record_active(on, route="hook")  # the backend is built before the scheduler's first step
        active = json.loads((tmp_path / "active.json").read_text())
        assert active["defrag_requested"] is True and active["defrag_applied"] is False
        assert active["defrag_note"] == DEFRAG_NOT_WIRED
        world = World(sgl, seed=7)
        s = _scheduler_instance(sgl, world, sgl.Scheduler)
        hook = defrag_hook.attach(s, _settings())  # what the wrapper does at the first step
        assert hook.applied
        active = json.loads((tmp_path / "active.json").read_text())
        # Attached is not applied: nothing has run yet, and active.json says so.
        assert active["defrag_attached"] is True and active["defrag_applied"] is False
        assert "has not run yet" in active["defrag_note"]
        assert (active["verify_kernel"], active["route"], active["bundle_sha"]) == ("bundled", "hook", "a" * 64)
        assert hook.step() == "ran"
        active = json.loads((tmp_path / "active.json").read_text())
        assert active["defrag_applied"] is True and active["defrag_note"] is None
    finally:
        plugin.unregister()
    assert not defrag_hook.installed(sgl.Scheduler)
    bad = VerifyConfig("stock", None, True, "test", extra={"defrag_options": {"interval_steps": 0}})
    assert plugin.install_defrag(lambda: bad) is False
    from sglang_verify_plugin.config import defrag_status

    assert defrag_status()["defrag_applied"] is False and "interval_steps" in defrag_status()["defrag_note"]
    assert not defrag_hook.installed(sgl.Scheduler)


def test_under_the_overlap_scheduler_a_hook_that_never_ran_reports_not_applied_with_counts(sgl, tmp_path, monkeypatch):
    """SGLang's overlap loop keeps the previous batch in result_queue at every busy step: the hook
    skips each time, and active.json must say defrag_applied false with the skipped_overlap count."""
    from sglang_verify_plugin import defrag_hook
    from sglang_verify_plugin.config import flush

    cfg = tmp_path / "verify_backend.json"
    cfg.write_text(json.dumps({"verify_kernel": "stock", "defrag": True}))
    monkeypatch.setenv("ORCHESTRATOR_VERIFY_CONFIG", str(cfg))
    monkeypatch.setattr("sglang_verify_plugin.config._DEFRAG_STATUS", {})

    class OverlapScheduler(sgl.Scheduler):
        def get_next_batch_to_run(self, *a, **k):
            return "batch"

    defrag_hook.install(_settings(), scheduler_cls=OverlapScheduler)
    try:
        world = World(sgl, seed=9)
        rtt = world.rtp.req_to_token.clone()
        s = _scheduler_instance(sgl, world, OverlapScheduler)
        s.enable_overlap, s.result_queue = True, [("batch", "result")]  # busy: a batch always in flight
        for _ in range(5):
            s.get_next_batch_to_run()
        hook = s.__dict__[defrag_hook.STATE_ATTR]
        assert hook.runs == 0 and hook.skips["overlap_batch_in_flight"] == 5
        assert sgl.torch.equal(world.rtp.req_to_token, rtt), "nothing moved"
        flush()
        active = json.loads((tmp_path / "active.json").read_text())
        assert active["defrag_attached"] is True and active["defrag_applied"] is False
        assert active["defrag_skipped_overlap"] == 5 and active["defrag_runs"] == 0
        assert "5 skipped with an overlap batch in flight" in active["defrag_note"]
        s.result_queue = []  # an idle step: the hook runs
        s.get_next_batch_to_run()
        active = json.loads((tmp_path / "active.json").read_text())
        assert hook.runs == 1 and active["defrag_applied"] is True and active["defrag_skipped_overlap"] == 5
    finally:
        defrag_hook.uninstall(OverlapScheduler)
