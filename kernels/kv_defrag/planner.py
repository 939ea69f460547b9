"""Relocation planner: a pure, deterministic function from a pool index to a move plan.

Terms (all per live request row, positions ``0..seq_len-1``):

- run: a maximal stretch of consecutive positions whose slots are consecutive ascending
  (``slot[p+1] == slot[p] + 1``). The verify kernel reads a run as one contiguous block.
- target run length ``T_r = min(P, seq_len_r)`` for a minimum run length ``P``; with
  ``P = None`` the target is the whole request (``T_r = seq_len_r``: one run).
- a run is *good* when its length is ``>= T_r``.

Plan shape: a sequence of *rounds*, each with a schedule of batched *steps*:

- incremental round: every destination is free when the round starts and every source is
  live, so its moves commute: one "copy" step, no staging. Slots it vacates are free space
  for the next round (chains broken through free space).
- compaction round (at most one, only if incremental rounds leave requests below target and
  it lowers fragmentation): destinations may be sources of the same round. :func:`schedule`
  orders them in dependency levels (level k writes only slots vacated by level k-1, one copy
  step each); cycles and chains deeper than ``max_levels`` go through staging ("gather"
  first, "scatter" last).

Placement (n = live positions, E = extents of the space; O(n log n + g log E) for g gaps):

1. Cut every row into runs; pin every slot that lies in a good run of *any* owner (runs
   already in place never move).
2. Visit the requests with unpinned positions, longest first (ties by row id). Their
   unpinned positions form *gaps* between pinned neighbours. A gap is placed as one block:
   right after its left neighbour's (new) slot when the extent starting there is long
   enough, else right before its right neighbour's slot, else at the lowest extent that fits
   (first fit). Incremental rounds use first fit only if the gap spans more than one run
   (so the move lowers the run count) and leave the gap otherwise; with ``P = None`` they
   first try the longest unpinned run as an anchor that every gap attaches to. With
   ``split=True`` an incremental round places a gap that fits nowhere whole in pieces of whole
   runs over several free extents (extend the previous position's run, else >= 2 runs into the
   largest extent); each piece lowers the run count and every destination is still free at
   the round start. The
   compaction round's space is every unpinned slot (free or held by an unpinned token) and it
   places every unpinned token, spilling over the largest extents when no extent fits.
3. A placed slot is pinned, so a slot shared by several rows moves once; the remap
   ``old slot -> new slot`` updates every owner.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .pool import PoolError, PoolIndex, validate_pool


@dataclass(frozen=True)
class FragStats:
    """Fragmentation of a pool index. Token counts are row positions (a shared slot counts
    once per owner); ``p`` is the minimum run length the fraction refers to (None: whole request)."""

    requests: int
    live_tokens: int
    unique_slots: int
    runs: int
    runs_per_request: float
    mean_run_length: float
    frac_tokens_in_good_runs: float
    p: int | None
    free_slots: int
    free_extents: int
    largest_free_extent: int

    def as_dict(self) -> dict:
        return dict(self.__dict__)


@dataclass(frozen=True)
class Step:
    """One batched operation of a round's schedule (int64 slot arrays of equal length).

    kind "copy": ``buf[dst] = buf[src]`` for all pairs at once; no dst is a src of the same step.
    kind "gather": ``staging = buf[src]`` (``dst`` is ``arange(k)``, the staging rows).
    kind "scatter": ``buf[dst] = staging`` (``src`` is ``arange(k)``).
    """

    kind: str
    src: np.ndarray
    dst: np.ndarray


@dataclass(frozen=True)
class Round:
    """The moves ``src[i] -> dst[i]`` of one round (distinct srcs, distinct dsts; int64) and the
    order that executes them safely: ``steps``. Mode "incremental": every dst is free at the
    round start (one copy step). Mode "compact": dsts may be srcs of the same round (chains,
    cycles); chains run as dependency levels, what is left (cycles, very long chains) goes
    through a staging buffer."""

    mode: str
    src: np.ndarray
    dst: np.ndarray
    steps: tuple[Step, ...]

    @property
    def staged_tokens(self) -> int:
        return sum(int(s.src.size) for s in self.steps if s.kind == "gather")


@dataclass(frozen=True)
class Plan:
    """A relocation plan.

    rounds: executed in order; moves inside a round in any order.
    remap: int64 ``[num_slots + 1]``, original slot -> final slot (identity where unmoved).
    free_after: int64 ascending, the free slots after the plan.
    tokens_moved: slot copies over all rounds (a slot moved in two rounds counts twice).
    """

    num_slots: int
    min_run: int | None
    rounds: tuple[Round, ...]
    remap: np.ndarray
    free_after: np.ndarray
    tokens_moved: int
    frag_before: FragStats
    frag_after: FragStats
    stop_reason: str
    notes: list[str] = field(default_factory=list)
    # Budgeted plans (``max_attempts``): the index into the last round's request order (longest
    # first) where it stopped, for the next plan's ``start``; None when that round visited every
    # request.
    resume_at: int | None = None
    scanned: int = 0  # requests the last incremental round visited (whole or in part)

    def bytes_moved(self, layers: int, elem_size: int) -> int:
        """Bytes copied: tokens_moved x layers x 576 x elem_size (elem_size 2 for bf16, 1 for fp8)."""
        return self.tokens_moved * layers * 576 * elem_size

    @property
    def staged_tokens(self) -> int:
        """Moves routed through the staging buffer (each costs an extra read and write)."""
        return sum(r.staged_tokens for r in self.rounds)

    @property
    def copy_steps(self) -> int:
        return sum(len(r.steps) for r in self.rounds)

    def src_dst(self) -> tuple[np.ndarray, np.ndarray]:
        """All moves concatenated in execution order (round by round)."""
        if not self.rounds:
            e = np.zeros(0, dtype=np.int64)
            return e, e
        return (np.concatenate([r.src for r in self.rounds]), np.concatenate([r.dst for r in self.rounds]))


# --------------------------------------------------------------------------- metrics


@dataclass(frozen=True)
class _Flat:
    """Live positions flattened request-major: ``s[offs[k] + p]`` is the slot of position p of
    request ``reqs[k]`` (int64 arrays). What the planner iterates on; no req_to_token copies."""

    num_slots: int
    reqs: np.ndarray
    lens: np.ndarray
    r: np.ndarray
    s: np.ndarray
    free: np.ndarray
    # derived arrays computed once per (immutable) state: run decomposition, ...
    memo: dict = field(default_factory=dict, compare=False, repr=False)

    @staticmethod
    def of(pool: PoolIndex) -> _Flat:
        cached = pool.__dict__.get("_flat")  # one per immutable index (metric + planner share it)
        if cached is not None:
            return cached
        r, _p, s = pool.live_positions()
        reqs = pool.live_requests()
        flat = _Flat(pool.num_slots, reqs, pool.seq_lens[reqs].astype(np.int64), r, s, pool.free_slots)
        object.__setattr__(pool, "_flat", flat)
        return flat

    def moved(self, src: np.ndarray, dst: np.ndarray) -> _Flat:
        """State after moving every ``src[i] -> dst[i]`` at once."""
        remap = np.arange(self.num_slots + 1, dtype=np.int64)
        remap[src] = dst
        isfree = np.zeros(self.num_slots + 1, dtype=bool)
        isfree[self.free] = True
        isfree[src] = True
        isfree[dst] = False
        free = np.flatnonzero(isfree[1:]).astype(np.int64) + 1
        return _Flat(self.num_slots, self.reqs, self.lens, self.r, remap[self.s], free)


def _runs(flat: _Flat):
    """Run decomposition of the flat live positions: (run_start index, run_len, run_id per token)."""
    if "runs" not in flat.memo:
        flat.memo["runs"] = _runs_of(flat)
    return flat.memo["runs"]


def _runs_of(flat: _Flat):
    s, r = flat.s, flat.r
    n = s.size
    brk = np.ones(n, dtype=bool)
    if n > 1:
        brk[1:] = (r[1:] != r[:-1]) | (s[1:] != s[:-1] + 1)
    run_start = np.flatnonzero(brk)
    run_len = np.diff(np.append(run_start, n))
    run_id = np.cumsum(brk) - 1
    return run_start, run_len, run_id


def _targets(seq_lens: np.ndarray, min_run: int | None) -> np.ndarray:
    lens = seq_lens.astype(np.int64)
    return lens if min_run is None else np.minimum(lens, min_run)


def _free_extents(free: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Maximal runs of consecutive free slots: (start, length) int64, ascending by start."""
    if free.size == 0:
        z = np.zeros(0, dtype=np.int64)
        return z, z
    brk = np.ones(free.size, dtype=bool)
    brk[1:] = np.diff(free) != 1
    starts_idx = np.flatnonzero(brk)
    lengths = np.diff(np.append(starts_idx, free.size))
    return free[starts_idx].astype(np.int64), lengths.astype(np.int64)


def fragmentation(pool: PoolIndex, min_run: int | None = None) -> FragStats:
    """Fragmentation metrics of ``pool`` (see module docstring for run / good run)."""
    return _frag(_Flat.of(pool), min_run)


def _frag(flat: _Flat, min_run: int | None) -> FragStats:
    run_start, run_len, _ = _runs(flat)
    n_tok = int(flat.s.size)
    n_runs = int(run_len.size)
    good = 0
    if n_runs:
        run_k = np.repeat(np.arange(flat.reqs.size), flat.lens)[run_start]
        good = int(run_len[run_len >= _targets(flat.lens[run_k], min_run)].sum())
    mark = np.zeros(flat.num_slots + 1, dtype=bool)
    mark[flat.s] = True
    _, ext_len = _free_extents(flat.free)
    nreq = int(flat.reqs.size)
    return FragStats(
        requests=nreq,
        live_tokens=n_tok,
        unique_slots=int(mark.sum()),
        runs=n_runs,
        runs_per_request=n_runs / nreq if nreq else 0.0,
        mean_run_length=n_tok / n_runs if n_runs else 0.0,
        frac_tokens_in_good_runs=good / n_tok if n_tok else 1.0,
        p=min_run,
        free_slots=int(flat.free.size),
        free_extents=int(ext_len.size),
        largest_free_extent=int(ext_len.max()) if ext_len.size else 0,
    )


# --------------------------------------------------------------------------- free extents


class _Extents:
    """Free extents of one round with O(log E) first fit (max segment tree over address order)
    and O(1) lookup of the extent starting / ending at an address. Extents only shrink from
    either end during a round, so they never split."""

    def __init__(self, free: np.ndarray, num_slots: int):
        self.start, self.length = _free_extents(free)
        self.start = self.start.copy()
        self.length = self.length.copy()
        e = self.length.size
        self.at_start = np.full(num_slots + 2, -1, dtype=np.int64)
        self.at_end = np.full(num_slots + 2, -1, dtype=np.int64)
        if e:
            self.at_start[self.start] = np.arange(e)
            self.at_end[self.start + self.length - 1] = np.arange(e)
        size = 1
        while size < max(e, 1):
            size *= 2
        self.size = size
        tree = np.zeros(2 * size, dtype=np.int64)
        tree[size : size + e] = self.length
        lo = size
        while lo > 1:
            hi = lo
            lo //= 2
            tree[lo:hi] = np.maximum(tree[2 * lo : 2 * hi : 2], tree[2 * lo + 1 : 2 * hi : 2])
        self.tree = tree
        self.num_slots = num_slots

    def _set(self, e: int, start: int, length: int) -> None:
        old_s, old_l = int(self.start[e]), int(self.length[e])
        if old_l > 0:
            self.at_start[old_s] = -1
            self.at_end[old_s + old_l - 1] = -1
        self.start[e], self.length[e] = start, length
        if length > 0:
            self.at_start[start] = e
            self.at_end[start + length - 1] = e
        i = self.size + e
        self.tree[i] = length
        i //= 2
        while i >= 1:
            self.tree[i] = max(self.tree[2 * i], self.tree[2 * i + 1])
            i //= 2

    def starting_at(self, addr: int) -> int:
        return int(self.at_start[addr]) if 1 <= addr <= self.num_slots else -1

    def ending_at(self, addr: int) -> int:
        return int(self.at_end[addr]) if 1 <= addr <= self.num_slots else -1

    def take_prefix(self, e: int, g: int) -> int:
        s, ln = int(self.start[e]), int(self.length[e])
        self._set(e, s + g, ln - g)
        return s

    def take_suffix(self, e: int, g: int) -> int:
        s, ln = int(self.start[e]), int(self.length[e])
        self._set(e, s, ln - g)
        return s + ln - g

    def first_fit(self, g: int) -> int:
        """Lowest-address extent with length >= g, or -1."""
        if self.tree[1] < g:
            return -1
        i = 1
        while i < self.size:
            i = 2 * i if self.tree[2 * i] >= g else 2 * i + 1
        return i - self.size

    def state(self, e: int) -> tuple[int, int, int]:
        return e, int(self.start[e]), int(self.length[e])


# --------------------------------------------------------------------------- planning


def _gaps(unfixed: np.ndarray) -> list[tuple[int, int]]:
    """Maximal [a, b) ranges where ``unfixed`` is True."""
    if not unfixed.any():
        return []
    d = np.diff(np.concatenate(([0], unfixed.view(np.int8), [0])))
    a = np.flatnonzero(d == 1)
    b = np.flatnonzero(d == -1)
    return list(zip(a.tolist(), b.tolist()))


def _multi_run(seg: np.ndarray) -> bool:
    return seg.size > 1 and bool(np.any(seg[1:] != seg[:-1] + 1))


class _BudgetSpent(Exception):
    """Internal: the round's move budget is spent; the planner returns what it committed."""


class _RoundPlanner:
    """Plans one round. mode "incremental": destinations are free slots only, a gap moves only
    if that merges it with a neighbour or reduces its run count. mode "compact": the space is
    every slot that is not pinned (free or held by a token that is not in a good run), and
    every unpinned token gets a destination (possibly its own slot is reused by another)."""

    def __init__(
        self,
        flat: _Flat,
        min_run: int | None,
        mode: str,
        split: bool = False,
        max_moves: int | None = None,
        max_attempts: int | None = None,
        start: int = 0,
    ):
        self.flat = flat
        self.min_run = min_run
        self.mode = mode
        self.split = split and mode == "incremental"
        # Work budget (incremental rounds only): planning stops at the first placement that
        # would take the round past ``max_moves`` moves, so the Python placement loop, the
        # planner's dominant cost, is bounded by the budget rather than by the pool.
        self.budget = max_moves if mode == "incremental" else None
        self.n_moved = 0
        # Scan budget: requests visited, gaps and split pieces examined (each ~ a few numpy
        # calls). Runs that cannot move cost scanning but no moves, so the move budget alone
        # does not bound the loop. A round starts at request ``start`` of the order (longest
        # first) and wraps; where it stopped is ``resume_at`` (None: it visited every request).
        self.max_attempts = max_attempts if mode == "incremental" else None
        self.attempts = 0
        self.start = int(start)
        self.resume_at: int | None = None
        self.visited = 0
        n = flat.num_slots
        self.s = flat.s
        run_start, run_len, run_id = _runs(flat)
        run_k = np.repeat(np.arange(flat.reqs.size), flat.lens)[run_start]
        good_run = run_len >= _targets(flat.lens[run_k], min_run)
        self.fixed = np.zeros(n + 1, dtype=bool)
        self.fixed[self.s[good_run[run_id]]] = True
        self.new = np.arange(n + 1, dtype=np.int64)  # current slot -> slot after this round
        if mode == "incremental":
            space = flat.free
        else:
            pinned = self.fixed.copy()
            pinned[0] = True
            space = np.flatnonzero(~pinned).astype(np.int64)
        self.ext = _Extents(space, n)
        self.src: list[np.ndarray] = []
        self.dst: list[np.ndarray] = []

    def run(self) -> tuple[np.ndarray, np.ndarray]:
        reqs, lens = self.flat.reqs, self.flat.lens
        offs = np.cumsum(lens) - lens
        order = np.lexsort((reqs, -lens))  # longest first, ties by row id
        n_req = int(order.size)
        first = self.start % n_req if n_req else 0
        pos = first
        try:
            for j in range(n_req):
                pos = (first + j) % n_req
                k = int(order[pos])
                self._attempt()
                self.visited += 1
                i0, ln = int(offs[k]), int(lens[k])
                rs = self.s[i0 : i0 + ln]
                unfixed = ~self.fixed[rs]
                if not unfixed.any():
                    continue
                if self.mode == "incremental" and self.min_run is None and self._try_anchor(rs, unfixed):
                    continue
                for a, b in _gaps(unfixed):
                    self._attempt()
                    if not self._place_gap(rs, a, b) and self.split:
                        self._place_split(rs, a, b)
        except _BudgetSpent:
            # Moved something: this request again next time (it may be half done). Moved
            # nothing: the budget went on scanning this request, so the next scan begins at
            # the next one (else every scan would stop at the same place: no progress).
            self.resume_at = pos if self.src else (pos + 1) % n_req
        if not self.src:
            z = np.zeros(0, dtype=np.int64)
            return z, z
        src, dst = np.concatenate(self.src), np.concatenate(self.dst)
        keep = src != dst  # compact mode may hand a token its own slot
        return src[keep], dst[keep]

    def _attempt(self) -> None:
        self.attempts += 1
        if self.max_attempts is not None and self.attempts > self.max_attempts:
            raise _BudgetSpent

    def _commit(self, moved: np.ndarray, dst: np.ndarray) -> None:
        if self.budget is not None and self.n_moved + moved.size > self.budget:
            # Over budget: stop the round here (every committed move stays valid on its own:
            # its destination was free at the round start). Only a round that has committed
            # nothing yet takes a prefix of this placement (cut at a run boundary when one
            # fits), so a budget smaller than every gap still makes progress.
            left = self.budget - self.n_moved
            if self.n_moved == 0 and left > 0:
                brk = np.flatnonzero(moved[1 : left + 1] != moved[:left] + 1) + 1
                cut = int(brk[-1]) if brk.size else left
                self._record(moved[:cut], dst[:cut])
            raise _BudgetSpent
        self._record(moved, dst)

    def _record(self, moved: np.ndarray, dst: np.ndarray) -> None:
        self.n_moved += int(moved.size)
        self.fixed[moved] = True
        self.new[moved] = dst
        self.src.append(moved.astype(np.int64))
        self.dst.append(dst)

    def _attach(self, rs: np.ndarray, a: int, b: int) -> int:
        """Destination start for gap [a, b) adjacent to a fixed neighbour, or -1 (takes the space)."""
        g = b - a
        if a > 0:
            left = int(self.new[rs[a - 1]])
            e = self.ext.starting_at(left + 1)
            if e >= 0 and self.ext.length[e] >= g:
                return self.ext.take_prefix(e, g)
        if b < rs.size:
            right = int(self.new[rs[b]])
            e = self.ext.ending_at(right - 1)
            if e >= 0 and self.ext.length[e] >= g:
                return self.ext.take_suffix(e, g)
        return -1

    def _place_gap(self, rs: np.ndarray, a: int, b: int) -> bool:
        g = b - a
        seg = rs[a:b]
        start = self._attach(rs, a, b)
        if start < 0 and (self.mode == "compact" or _multi_run(seg)):
            e = self.ext.first_fit(g)
            if e >= 0:
                start = self.ext.take_prefix(e, g)
        if start >= 0:
            self._commit(seg, np.arange(start, start + g, dtype=np.int64))
            return True
        if self.mode != "compact":
            return False
        # Compact mode must place every token: spill over the largest extents, in pieces.
        pieces, left = [], g
        while left:
            if self.ext.tree[1] == 0:  # cannot happen: space = free + unpinned slots
                raise RuntimeError("compaction ran out of space (planner invariant broken)")
            e = self.ext.first_fit(int(self.ext.tree[1]))
            take = min(left, int(self.ext.length[e]))
            st = self.ext.take_prefix(e, take)
            pieces.append(np.arange(st, st + take, dtype=np.int64))
            left -= take
        self._commit(seg, np.concatenate(pieces))
        return True

    def _place_split(self, rs: np.ndarray, a: int, b: int) -> None:
        """Incremental split placement of a gap [a, b) that fits no free extent whole. The gap
        is cut into its current runs; consecutive whole runs are moved together into one free
        extent (landing on consecutive slots), so a piece never breaks a run: a piece of k runs
        that extends the run ending just before it (the extent starting right after the
        previous position's new slot) saves k runs, a piece of k >= 2 runs moved into the
        largest extent saves k - 1. A run longer than every usable extent stays where it is.
        Every destination is free at the round start (extents only shrink), so the round stays
        failure-atomic; the caller keeps the round only if fragmentation drops."""
        seg = rs[a:b]
        brk = np.ones(seg.size + 1, dtype=bool)
        brk[1:-1] = seg[1:] != seg[:-1] + 1
        cuts = np.flatnonzero(brk) + a  # run boundaries inside the gap, a .. b
        ci = 0  # index into cuts of the current position i = cuts[ci]
        last = cuts.size - 1
        while ci < last:
            self._attempt()
            i = int(cuts[ci])
            start = -1
            if i > 0:
                e = self.ext.starting_at(int(self.new[rs[i - 1]]) + 1)
                if e >= 0:
                    cj = int(np.searchsorted(cuts, i + int(self.ext.length[e]), side="right")) - 1
                    if cj > ci:
                        start = self.ext.take_prefix(e, int(cuts[cj]) - i)
            if start < 0:
                big = int(self.ext.tree[1])
                cj = int(np.searchsorted(cuts, i + big, side="right")) - 1
                if cj - ci < 2:  # fewer than two whole runs fit: leave this run, go on
                    ci += 1
                    continue
                start = self.ext.take_prefix(self.ext.first_fit(big), int(cuts[cj]) - i)
            j = int(cuts[cj])
            self._commit(rs[i:j], np.arange(start, start + j - i, dtype=np.int64))
            ci = cj

    def _try_anchor(self, rs: np.ndarray, unfixed: np.ndarray) -> bool:
        """P=None: keep the longest unpinned run in place and attach every gap to the layout.
        All-or-nothing: on any failure the extents are restored and False is returned."""
        brk = np.ones(rs.size, dtype=bool)
        brk[1:] = (rs[1:] != rs[:-1] + 1) | (unfixed[1:] != unfixed[:-1])
        starts = np.flatnonzero(brk)
        lengths = np.diff(np.append(starts, rs.size))
        cand = unfixed[starts]
        if not cand.any():
            return False
        j = int(np.argmax(np.where(cand, lengths, -1)))  # first longest: deterministic
        a0, a1 = int(starts[j]), int(starts[j]) + int(lengths[j])
        rest = unfixed.copy()
        rest[a0:a1] = False
        gaps = _gaps(rest)
        if not gaps:
            return False
        undo: list[tuple[int, int, int]] = []
        placed: list[tuple[int, int, int]] = []
        before = sorted([g for g in gaps if g[1] <= a0], key=lambda g: -g[0])
        after = sorted([g for g in gaps if g[0] >= a1], key=lambda g: g[0])
        self.fixed[rs[a0:a1]] = True
        ok = True
        for a, b in before + after:
            snap = self._snapshot_for(rs, a, b)
            start = self._attach(rs, a, b)
            if start < 0:
                ok = False
                break
            undo.extend(snap)
            placed.append((a, b, start))
        if ok:
            for a, b, start in placed:
                self._commit(rs[a:b], np.arange(start, start + b - a, dtype=np.int64))
            return True
        for e, st, ln in reversed(undo):
            self.ext._set(e, st, ln)
        self.fixed[rs[a0:a1]] = False
        return False

    def _snapshot_for(self, rs: np.ndarray, a: int, b: int) -> list[tuple[int, int, int]]:
        snaps = []
        if a > 0:
            e = self.ext.starting_at(int(self.new[rs[a - 1]]) + 1)
            if e >= 0:
                snaps.append(self.ext.state(e))
        if b < rs.size:
            e = self.ext.ending_at(int(self.new[rs[b]]) - 1)
            if e >= 0:
                snaps.append(self.ext.state(e))
        return snaps


def schedule(src: np.ndarray, dst: np.ndarray, num_slots: int, max_levels: int = 64) -> tuple[Step, ...]:
    """Order the moves ``src -> dst`` (distinct srcs, distinct dsts) so that no destination is
    written before its content has been read.

    Level 0: moves whose dst is not a src (free). Level k: moves whose dst is the src of a
    level k-1 move (vacated by it). Each level is one commuting copy step. Moves on cycles, or
    deeper than ``max_levels``, are gathered into staging first and scattered last.
    O(n): each level follows the chains one step from the previous level.
    """
    n = src.size
    if n == 0:
        return ()
    move_of_src = np.full(num_slots + 1, -1, dtype=np.int64)
    move_of_src[src] = np.arange(n)
    move_of_dst = np.full(num_slots + 1, -1, dtype=np.int64)
    move_of_dst[dst] = np.arange(n)
    prev = move_of_dst[src]  # the move that overwrites my src, so must run after me, or -1
    level = np.full(n, -1, dtype=np.int64)
    front = np.flatnonzero(move_of_src[dst] < 0)  # dst not a src: free
    k = 0
    while front.size and k <= max_levels:  # chains are disjoint paths: O(n) in total
        level[front] = k
        front = prev[front]
        front = front[front >= 0]
        k += 1
    staged = level < 0
    steps: list[Step] = []
    if staged.any():
        ss = src[staged]
        steps.append(Step("gather", ss, np.arange(ss.size, dtype=np.int64)))
    ok = np.flatnonzero(level >= 0)
    order = ok[np.argsort(level[ok], kind="stable")]  # by level, then by move index
    for chunk in np.split(order, np.cumsum(np.bincount(level[ok]))[:-1]):
        steps.append(Step("copy", src[chunk], dst[chunk]))
    if staged.any():
        ds = dst[staged]
        steps.append(Step("scatter", np.arange(ds.size, dtype=np.int64), ds))
    return tuple(steps)


def apply_round(pool: PoolIndex, src: np.ndarray, dst: np.ndarray) -> PoolIndex:
    """The pool index after moving every ``src[i] -> dst[i]`` at once; pure."""
    flat = _Flat.of(pool).moved(src, dst)
    rtt = pool.req_to_token.copy()
    r, p, _ = pool.live_positions()
    rtt[r, p] = flat.s.astype(np.int32)
    return PoolIndex(pool.num_slots, rtt, pool.seq_lens.copy(), flat.free)


def apply_plan(pool: PoolIndex, plan: Plan) -> PoolIndex:
    """The pool index after the whole plan; pure (numpy model of what the executor does)."""
    rtt = pool.req_to_token.copy()
    r, p, s = pool.live_positions()
    rtt[r, p] = plan.remap[s].astype(np.int32)
    return PoolIndex(pool.num_slots, rtt, pool.seq_lens.copy(), plan.free_after.copy())


def _better(a: FragStats, b: FragStats) -> bool:
    """True when ``a`` is less fragmented than ``b``."""
    return (a.frac_tokens_in_good_runs, -a.runs) > (b.frac_tokens_in_good_runs, -b.runs)


def plan_defrag(
    pool: PoolIndex,
    min_run: int | None = None,
    max_rounds: int = 8,
    compact: bool = True,
    max_levels: int = 64,
    split: bool = False,
    max_moves: int | None = None,
    frag_before: FragStats | None = None,
    check: bool = True,
    max_attempts: int | None = None,
    start: int = 0,
) -> Plan:
    """Plan the relocation of ``pool`` (see module docstring). Pure and deterministic.

    min_run: minimum run length P (>= 1), or None for one run per request.
    max_rounds: upper bound on incremental rounds (>= 1); stops earlier when a round moves nothing.
    compact: when incremental rounds leave requests below target, add one compaction round
        (kept only if it lowers fragmentation), followed by incremental rounds again.
    max_levels: dependency levels per round before the rest goes through staging.
    split: incremental rounds may split a gap that fits no free extent whole into pieces over
        several free extents (see ``_RoundPlanner._place_split``); for pools with no large
        free extent (heavily churned, mostly full), where whole gaps never fit.
    max_moves: work budget, moves over all rounds (>= 1), or None. Planning stops at the first
        placement that would exceed it (a round that has placed nothing takes a prefix of its
        first placement, cut at a run boundary), so planning time is bounded by the budget;
        only incremental rounds are planned under a budget (``compact`` must be False).
        ``stop_reason`` then says ``max_moves=N reached``.
    frag_before: ``fragmentation(pool, min_run)`` when the caller already has it (trusted).
    check: validate ``pool`` first (a caller that has just validated it may pass False).
    max_attempts: scan budget per incremental round (>= 1), or None: requests visited plus gaps
        and split pieces examined; a round stops there (a run that cannot move costs scanning
        but no move, so ``max_moves`` alone does not bound the time). ``start``: the index into
        the round's request order (longest first, ties by row) where the first round begins
        (wrapping); ``Plan.resume_at`` is where the last round stopped, None if it visited
        every request. Pass it as the next plan's ``start`` so successive budgeted plans sweep
        every request. Both need ``compact=False``.
    """
    if min_run is not None and (not isinstance(min_run, (int, np.integer)) or min_run < 1):
        raise PoolError(f"min_run: must be an integer >= 1 or None, got {min_run!r}")
    if not isinstance(max_rounds, (int, np.integer)) or max_rounds < 1:
        raise PoolError(f"max_rounds: must be an integer >= 1, got {max_rounds!r}")
    if not isinstance(max_levels, (int, np.integer)) or max_levels < 0:
        raise PoolError(f"max_levels: must be an integer >= 0, got {max_levels!r}")
    if max_moves is not None:
        if not isinstance(max_moves, (int, np.integer)) or max_moves < 1:
            raise PoolError(f"max_moves: must be an integer >= 1 or None, got {max_moves!r}")
        if compact:
            raise PoolError("max_moves: a budgeted plan has incremental rounds only (pass compact=False)")
    if max_attempts is not None:
        if not isinstance(max_attempts, (int, np.integer)) or max_attempts < 1:
            raise PoolError(f"max_attempts: must be an integer >= 1 or None, got {max_attempts!r}")
        if compact:
            raise PoolError("max_attempts: a budgeted plan has incremental rounds only (pass compact=False)")
    if check:
        validate_pool(pool)
    cur = _Flat.of(pool)
    before = _frag(cur, min_run) if frag_before is None else frag_before
    n = pool.num_slots
    total = np.arange(n + 1, dtype=np.int64)
    rounds: list[Round] = []
    notes: list[str] = []
    if pool.free_slots.size == 0:
        notes.append("no free slot: incremental rounds cannot move anything")
    # fragmentation of ``cur``; moves planned so far; where the next round starts / last stopped
    state = {"frag": before, "moves": 0, "start": int(start), "resume_at": None}

    def add(mode: str, src: np.ndarray, dst: np.ndarray, frag: FragStats, moved: _Flat) -> None:
        nonlocal total, cur
        if mode == "incremental":  # every destination is free at the round start: one copy step
            steps = (Step("copy", src, dst),) if src.size else ()
        else:
            steps = schedule(src, dst, n, max_levels)
        rounds.append(Round(mode, src, dst, steps))
        if rounds[1:]:
            step = np.arange(n + 1, dtype=np.int64)
            step[src] = dst
            total = step[total]
        else:  # first round: total is the identity
            total[src] = dst
        cur = moved  # == cur.moved(src, dst), already built for the trial
        state["frag"] = frag
        state["moves"] += int(src.size)

    def incremental() -> str:
        for _ in range(max_rounds):
            left = None if max_moves is None else max_moves - state["moves"]
            if left is not None and left < 1:
                return f"max_moves={max_moves} reached"
            rp = _RoundPlanner(
                cur, min_run, "incremental", split, max_moves=left, max_attempts=max_attempts, start=state["start"]
            )
            src, dst = rp.run()
            state["resume_at"] = rp.resume_at
            state["scanned"] = rp.visited
            if rp.resume_at is not None:
                state["start"] = rp.resume_at
            if src.size == 0:
                return "converged" if rp.resume_at is None else f"max_attempts={max_attempts} reached, nothing placed"
            moved = cur.moved(src, dst)
            trial = _frag(moved, min_run)
            if not _better(trial, state["frag"]):  # e.g. shared slots pulled back and forth: stop
                if rp.resume_at is not None:  # a budgeted round: the next scan starts past it
                    state["resume_at"] = (rp.resume_at + 1) % max(1, int(cur.reqs.size))
                    return f"max_attempts={max_attempts} reached, round dropped: no gain"
                return "converged (last round dropped: no gain)"
            add("incremental", src, dst, trial, moved)
        if max_moves is not None and state["moves"] >= max_moves:
            return f"max_moves={max_moves} reached"
        return f"max_rounds={max_rounds} reached"

    stop = incremental()
    frag = state["frag"]
    if compact and frag.frac_tokens_in_good_runs < 1.0:
        src, dst = _RoundPlanner(cur, min_run, "compact").run()
        if src.size:
            moved = cur.moved(src, dst)
            trial = _frag(moved, min_run)
            if _better(trial, frag):
                add("compact", src, dst, trial, moved)
                stop = incremental() + " after compaction"
            else:
                notes.append("compaction round dropped: it did not lower fragmentation")
    return Plan(
        num_slots=n,
        min_run=min_run,
        rounds=tuple(rounds),
        remap=total,
        free_after=cur.free,
        tokens_moved=int(sum(r.src.size for r in rounds)),
        frag_before=before,
        frag_after=state["frag"],
        stop_reason=stop,
        notes=notes,
        resume_at=state["resume_at"],
        scanned=state.get("scanned", 0),
    )
