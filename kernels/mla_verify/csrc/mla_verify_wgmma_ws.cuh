// sm_90a split kernel, warp-specialized form of the bf16 wgmma kernel (mla_verify_wgmma.cuh). Built in session 20;
// the default for bf16 calls since session 22 (MLAV_WS=1 in mla_verify.cu): 0.973-0.984x the time of the kernel it
// replaced on the batched and long shapes, 1.000 at B=1 L=32k, 1.015 at B=1 L=4k, outputs bitwise equal, parity and
// the three sanitizers clean, graph-buffer rows 1.000-1.058x of the exact-length call (session 22 call 1).
// The template's MODE picks the consumers: 0 the token-split consumers below; 1 the ASYM consumers, split by role
// instead of by tokens (below). The shipped build (MLAV_WS=1) launches MODE 1 where one split's grid holds >= 16 CTAs
// and MODE 0 elsewhere (MLAV_ASYM_MIN_CTAS in mla_verify.cu, since session 26); -DMLAV_WS=2 forces MODE 1 (A/B
// trees); 2 (-DMLAV_WS=3, experimental) ASYM where a CTA holds >= WS_ASYM_MIN_TILES tiles, the token-split consumers
// elsewhere. Measured (dense-verify-notes.md,
// "Session 23", "Session 24"): ASYM 0.938-0.945x the shipped time on the batched shapes, 1.08x at B=1 L=4k; MODE 2
// 0.967-0.976x batched and 1.00-1.02x elsewhere. With desc_add both builds' S loops are 2,050 instructions and MODE 2
// executes fewer in all, yet its ASYM CTAs stayed ~4% slower than the ASYM kernel's (ptxas scheduled the same loop
// differently; session 24 call 3). Every Work field taken from lane 0 (warp_uniform, below; session 25 call 1, over
// the kernel without it, same process): MODE 0 0.977-0.990x on every shape measured, outputs bitwise equal (shipped);
// ASYM 0.894-0.906x batched, 1.077 at B=1 L=4k; MODE 2 0.945-0.953x batched, 1.003-1.013 at B=1 and (4, 32k, 4, 16),
// still ~6% behind ASYM on the batched shapes. Parity, racecheck, synccheck and memcheck clean (measured forms).
// Why: the trace build put ~430 of the S phase's 2,276 cycles per tile on the next tile's gather, issued by the
// warps that also issue the wgmmas; with no loads at all the kernel ran 0.85-0.88x the time at the batched
// shapes and 0.93x at B=1 L=32k (session 20 call 3).
// Here a third warpgroup (the producer, 56 registers after setmaxnreg) gathers Q and every KV tile with cp.async,
// and the two consumer warpgroups (224 registers) run S, the lazy softmax and PV exactly as the shipped bf16
// kernel does (same tiles, same smem layout, same arithmetic: outputs should be bitwise equal), with no load
// instruction in their loop except a draft tile's V rows from v_extend. The consumer loop is the shipped kernel's
// bf16 tile step built from the same helpers (scale_mask, settle_softmax, load_draft_v, write_rows, PhaseTrace,
// ...); that instantiation is built only under -DMLAV_WS=0 now (A/B trees).
// Handoff per KV stage st (2 stages), two mbarriers each right after the shipped smem layout:
//   full[st]  : 128 producer arrivals, made by the hardware (cp.async.mbarrier.arrive.noinc) once each producer
//               thread's cp.async rows of the tile landed; the producer never waits for its copies. Tile j is
//               completion j/2 of full[j%2]; each consumer fences the generic-proxy writes it so observed for the
//               async proxy (wgmma) after its wait.
//   empty[st] : 256 consumer arrivals after PV read the stage. The producer refills stage st with tile j (j >= 2)
//               after completion j/2 - 1 of empty[st].
// Session 21 call 1 ran a first form in which each producer thread waited for its rows (cp.async.wait_group) and
// arrived itself, after issuing the next tile: the consumers' wait for a tile then held the next tile's whole issue
// (1,349 cycles per tile against the shipped kernel's 233; 1.13-1.19x its time, outputs bitwise equal).
// Register split: producer 56 / consumers 224 is the widest consumer share without spills; 24 / 240 (200 B of producer
// spills) ran 1.21-1.38x the shipped time (call 4).
// ASYM: warpgroup 0 (S) computes S for the whole tile at m64n64k16, which runs at the tensor peak where the shipped
// m64n32k16 runs at ~2/3 of it, bound by its smem operand fetch (session 20's wgmma_rate); it runs the softmax of
// all 64 rows and PV for dims 0..255. Warpgroup 1 (V) runs only PV for dims 256..511, handed P(j) and the rows'
// rescale through the mbarrier p_full[j & 1]; P(j) lives in tile j's rope atom (dead once S(j) has read it), so S(j+1)
// may start while the V warpgroup's PV(j) runs. The S warpgroup issues its PV(j) in two batches, the first behind
// P's first half (E4f, session 42). Registers: S 240, V 208, producer 56.
// The token-split consumers synchronize among themselves with named barrier 1 (256 threads); the producer never
// joins it and leaves once its last tile's copies landed. The trace build (-DMLAV_TRACE=1) sums the consumers'
// phases into the shipped kernel's slots (the first tile's wait for the producer counts in the wait slot, as there)
// and the producer's into row 2: slot 0 its prologue (Q and the first slots), per tile slot 1 its wait for a free
// stage and slot 2 its issue of the tile's copies, slot 7 its wait for its last copies.
#pragma once
#include "mla_verify_wgmma.cuh"

namespace mlav {
namespace wg {

constexpr int WS_THREADS = 384;  // warpgroups 0 and 1: consumers; warpgroup 2: producer
constexpr int WS_CONSUMERS = 256;
constexpr int WS_BAR_BYTES = 32;                           // four mbarriers
constexpr int WS_SMEM_BYTES = Smem::bytes + WS_BAR_BYTES;  // 231,456 B

__device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
// Arrives (release, CTA scope).
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
  asm volatile("{\n.reg .b64 st;\nmbarrier.arrive.shared::cta.b64 st, [%0];\n}\n" ::"r"(bar) : "memory");
}
// Arrives on the barrier once every cp.async this thread issued so far has landed (the thread does not wait; the
// arrival counts against the barrier's initial count: .noinc).
__device__ __forceinline__ void mbar_arrive_on_copies(uint32_t bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(bar) : "memory");
}
// Spins until the phase of the given parity has completed (acquire, CTA scope).
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
  uint32_t done = 0;
  do {
    asm volatile(
        "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
  } while (!done);
}
// Named barrier 1 over the consumer threads; the OR form returns whether any of them passed true.
__device__ __forceinline__ void consumer_sync() { asm volatile("bar.sync 1, 256;\n" ::: "memory"); }
__device__ __forceinline__ bool consumer_sync_or(bool v) {
  uint32_t r;
  asm volatile(
      "{\n.reg .pred p, q;\nsetp.ne.u32 q, %1, 0;\nbar.red.or.pred p, 1, 256, q;\nselp.u32 %0, 1, 0, p;\n}\n"
      : "=r"(r)
      : "r"((uint32_t)v)
      : "memory");
  return r != 0;
}

// Named barrier ids (0 is __syncthreads): 1 = both token-split consumers (consumer_sync); ASYM 2 = the S warpgroup's
// vote. ASYM's handoffs are mbarriers in the P atom, which it leaves unused: p_full[2] (the S warpgroup's P(j) and
// alpha(j)), a_free[2] (the V warpgroup has read alpha(j)) and fin (the row sums and the final m_run), so racecheck
// follows them as it follows the producer's full / empty. Session 22's named-barrier handoffs (bar.arrive in one
// warpgroup, bar.sync in the other) drew synccheck and racecheck reports, and a consumer_sync reached from both
// warpgroups after their loops still drew racecheck's (session 23 call 1); with fin all three tools are clean
// (call 2).
__device__ __forceinline__ bool s_group_sync_or(bool v) {
  uint32_t r;
  asm volatile(
      "{\n.reg .pred p, q;\nsetp.ne.u32 q, %1, 0;\nbar.red.or.pred p, 2, 128, q;\nselp.u32 %0, 1, 0, p;\n}\n"
      : "=r"(r)
      : "r"((uint32_t)v)
      : "memory");
  return r != 0;
}

// Every field of w from lane 0: the values are CTA-uniform, and the shuffles tell ptxas so (work_of loads them from
// memory). Uniform loop bounds and tile choices let ptxas drop convergence handling in the tile loops: MODE 0's loop
// 1,552 -> 1,527 SASS instructions, the ASYM S loop 2,051 -> 1,948 (nvcc 13).
__device__ __forceinline__ Work warp_uniform(Work w) {
  auto u = [](auto v) { return __shfl_sync(0xffffffffu, v, 0); };
  w.qo0 = u(w.qo0);
  w.kv0 = u(w.kv0);
  w.grow0 = u(w.grow0);
  w.n_b = u(w.n_b);
  w.L = u(w.L);
  w.R = u(w.R);
  w.row0 = u(w.row0);
  w.pb = u(w.pb);
  w.pe = u(w.pe);
  w.n_pre = u(w.n_pre);
  w.ntiles = u(w.ntiles);
  w.S = u(w.S);
  return w;
}

// The producer's rows: 8 lanes per row (copy_row8), rows l8 + 16 i (i < 4) of a tile; the four rows share l8 % 8.
struct WsRows {
  int l8, sub8;
  uint32_t off0;
  __device__ __forceinline__ explicit WsRows(int pt) : l8(pt >> 3), sub8(pt & 7), off0(tile_off(pt >> 3, pt & 7)) {}
};
// Q's rows into sQ; slot receives tile 0's slot ids.
__device__ __forceinline__ void ws_issue_q(const Params& p, const Work& w, const WsRows& r, uint32_t sQ,
                                           int64_t (&slot)[4]) {
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    bool ok;
    const __nv_bfloat16* src = q_src(p, w, r.l8 + 16 * i, ok);
    copy_row8(sQ, r.off0 + i * 16 * 128, src, r.sub8, ok);
    slot[i] = tile_slot(p, w, 0, BN, r.l8 + 16 * i);
  }
}
// Tile j's rows (slot holds their ids) into stage j % 2; slot receives tile j + 1's.
__device__ __forceinline__ void ws_issue_tile(const Params& p, const Work& w, const WsRows& r, uint32_t sKV, int j,
                                              int64_t (&slot)[4]) {
#ifdef MLAV_DIAG_NOLOAD
  // Timing diagnostic, never in a shipped build (-DMLAV_DIAG_NOLOAD=1 in a copy of csrc/ run by bench --tree-ab): no
  // KV copies from tile 2 on (the stages keep tiles 0 and 1; each full barrier still completes, on no copies), so a
  // timing shows the consumers' loop without the gather; the output is wrong.
  if (MLAV_DIAG_NOLOAD && j >= 2) return;
#endif
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    bool ok;
    const __nv_bfloat16* src = kv_src(p, w, j, BN, r.l8 + 16 * i, slot[i], ok);
    slot[i] = tile_slot(p, w, j + 1, BN, r.l8 + 16 * i);
    copy_row8(sKV + (j & 1) * TILE, r.off0 + i * 16 * 128, src, r.sub8, ok);
  }
}

// Staged epilogue of the token-split consumers (the kernel's STAGE = true, MODE 0 only; built where MLAV_PART_BF16,
// mla_verify_kernel.cuh, and launched by grid size: MLAV_STAGE_MIN_CTAS in mla_verify.cu): the rows go as bf16
// through the Q tile's space (dead after the loop) and out in 16-byte chunks, 1 KiB per row; split partials are bf16
// (the combine reads them so, p.part_bf16). Why: the trace build puts 9.9k cycles per CTA on write_rows' fp32 partial
// stores at B=1 L=4k (128 KiB per CTA, 16.6 MB in all; session 25 call 3), a quarter of the kernel's time. Session 5
// measured the same staging in the kernel before warp specialization at 0.924x (B=1 L=4k) and 0.971x (32k) with a
// 1.3-2.6% loss on the loop-bound shapes from its registers (dense-verify-notes.md, v6); here the consumers have 224
// registers after setmaxnreg. A first form (unrolled stores, write_rows kept as an unaligned-output fallback: +13.6 KB
// of code, the producer's start later) ran 1.018-1.077x at B=1 (session 25 call 4). This compact one (+2.8 KB), over
// write_rows in one process (session 26 call 1; CUDA-graph replays, L2 flushed): exact-length graphs 0.954 at B=1
// L=4k, 0.961 at 32k, 0.973 at (4, 32k, 4, 16), 0.988-1.007 elsewhere; but graphs captured on max-sized buffers (what
// SGLang replays) 1.006 at B=1 L=4k and 1.024 at L=512 (the bf16 combine's tail after the split kernel grew by as
// much as the split kernel saved), 0.914 at B=4 n=4 L=4k, 0.968 at 32k, 0.974 at B=8 L=4k (MLAV_STAGE_MIN_CTAS in
// mla_verify.cu: staged always by default; staging only from 4 CTAs per split was measured and not adopted, session
// 28). Parity 53/53 + 52/52 bitwise (max rel err 2.67e-3 against 2.12e-3 with fp32 partials: one more bf16 rounding
// per split), racecheck / memcheck / synccheck clean.

// Staging tile: row r at r * 1024 B, 16-byte chunk c (8 bf16) at ((c ^ (r & 7)) << 4): the fragment stores (4 bytes
// per lane, 8 rows per warp) and the chunk reads (8 consecutive chunks of a row per quarter-warp) hit distinct banks.
__device__ __forceinline__ uint32_t stage16_off(int r, int c) { return (uint32_t)(r * 1024 + ((c ^ (r & 7)) << 4)); }

// This consumer thread's rows r0 and r0 + 8 (O of warpgroup grp over both warpgroups' row sum, as write_rows) into the
// staging tile st, and their log2-sum-exp where S > 1. After the consumer barrier that follows publish_row_sums.
__device__ __forceinline__ void stage_rows_bf16(uint8_t* st, const Params& p, const Work& w, int s, const float* o,
                                                const float (&m_run)[2], const float* red_sum, int grp, int r0,
                                                int lane) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int r = r0 + 8 * h;
    if (w.row0 + r >= w.R) continue;
    const float l = row_sum(red_sum, r), inv = row_inv(l);
#pragma unroll
    for (int i = 0; i < 32; ++i)
      *reinterpret_cast<__nv_bfloat162*>(st + stage16_off(r, grp * 32 + i) + 4 * (lane & 3)) =
          __floats2bfloat162_rn(o[4 * i + 2 * h] * inv, o[4 * i + 2 * h + 1] * inv);
    put_split_lse(p, w, s, r, m_run[h], l, grp, lane);
  }
}

// The staged rows out in 16-byte chunks, by consumer thread t (< 256): chunk t & 63 of rows (t >> 6) + 4 j, to the
// bf16 output rows (S = 1; 16-byte aligned: the API checks o's pointer and strides, launch() again) or split s's bf16
// partial rows. A rolled loop (the code's size counts: a cold instruction fetch reaches the producer's code later the
// longer the kernel, session 25 call 4). After a consumer barrier.
__device__ __forceinline__ void store_rows_bf16(const uint8_t* st, const Params& p, const Work& w, int s, int t) {
  const int c = t & 63;
#pragma unroll 1
  for (int r = t >> 6; r < BM; r += 4) {
    const int gr = w.row0 + r;
    if (gr >= w.R) break;  // rows ascend
    const uint4 v = *reinterpret_cast<const uint4*>(st + stage16_off(r, c));
    __nv_bfloat16* dst = (w.S == 1 ? out_row(p, w, gr)
                                   : reinterpret_cast<__nv_bfloat16*>(p.ws_o) + (((int64_t)s * p.T + w.qo0) * p.H + gr) * D_V) +
                         c * 8;
    *reinterpret_cast<uint4*>(dst) = v;
  }
}

// A CTA with at least this many KV tiles runs the ASYM consumers in MODE 2 (-DMLAV_ASYM_MIN_TILES=N overrides it,
// e.g. 2 for a sanitizer run in which short parity cases mix both consumer bodies in one launch).
#ifndef MLAV_ASYM_MIN_TILES
#define MLAV_ASYM_MIN_TILES 32
#endif
constexpr int WS_ASYM_MIN_TILES = MLAV_ASYM_MIN_TILES;

// ASYM's S warpgroup on tile j: S (issue_qk64's 32 elements) as its two 32-token halves sh (issue_qk's layout for
// grp = half), scaled and masked, then the lazy softmax's vote over the warpgroup: returns exact_step (some row passed
// m_run + LAZY_TAU: every row's reference moves), with m_run and alpha (the caller's 1s) updated where it does. Trace
// slots 3 (before the vote) and 4 (after). Shared by the bf16 kernel's ASYM loop and the fp8 kernel's.
__device__ __forceinline__ bool asym_scale_vote(const float (&sc)[32], float (&sh)[2][16], float (&m_run)[2],
                                                float (&alpha)[2], const Params& p, const Work& w, int j,
                                                const float (&sl_row)[2], const int (&tok_row)[2], int64_t mask_base,
                                                int lane, PhaseTrace& tr) {
#pragma unroll
  for (int e = 0; e < 16; ++e) {
    sh[0][e] = sc[e];
    sh[1][e] = sc[16 + e];
  }
  float tmax[2][2];
  bool over = false;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    scale_mask(sh[half], tmax[half], p, w, j, sl_row, tok_row, mask_base, half, lane);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      tmax[half][h] = reduce_row_max(tmax[half][h]);
      over |= tmax[half][h] > m_run[h] + LAZY_TAU;
    }
  }
  tr.mark(3);
  const bool exact_step = s_group_sync_or(over);
  tr.mark(4);
  if (exact_step) {
#pragma unroll
    for (int h = 0; h < 2; ++h) exact_row_max(m_run[h], alpha[h], fmaxf(tmax[0][h], tmax[1][h]));
  }
  return exact_step;
}

// MODE 0: the token-split consumers (both warpgroups run S for half the tile's tokens, as mla_verify_wgmma.cuh);
// 1: the S and V warpgroups (ASYM); both shipped, chosen per launch by grid size (mla_verify.cu, MLAV_ASYM_MIN_CTAS).
// 2 (-DMLAV_WS=3, experimental): ASYM where the CTA holds >= WS_ASYM_MIN_TILES tiles, the token-split ones elsewhere.
// MODE 1 and 2 issue Q and tile 0 before the init barrier (EARLY, below). STAGE (MODE 0 only): the staged bf16
// epilogue (above) instead of write_rows.
template <int MODE, bool STAGE = false>
__global__ void __launch_bounds__(WS_THREADS, 1) mla_verify_split_wgmma_ws_kernel(const Params p) {
  static_assert(!STAGE || MODE == 0, "only the token-split consumers stage their rows");
  constexpr bool EARLY = MODE != 0;
  // Dynamic smem only (a static array would be padded to 1 KiB: the TU's other extern is 1024-aligned): the
  // shipped kernel's layout from the same 1024-aligned base, then the four mbarriers (full[0], full[1], empty[0],
  // empty[1]) right after it (WS_SMEM_BYTES has room for both at any base). With the barriers in front instead, the
  // base was not a compile-time fold of the aligned extern and ptxas recomputed it at every smem address
  // (session 21 call 3, Nsight Compute: +13.6% executed instructions in the softmax phase).
  extern __shared__ __align__(1024) uint8_t smem_raw[];
  const uint32_t raw = smem_u32(smem_raw);
  const uint32_t base = (raw + 1023u) & ~1023u;
  uint8_t* smem = smem_raw + (base - raw);
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int grp = warp >> 2, wq = warp & 3;  // warpgroup (2: producer), warp within it
  const int s = blockIdx.y;
  PhaseTrace tr;  // the shipped kernel's phase slots (mla_verify_wgmma.cuh)
  pdl_signal(p);
  const Work w = warp_uniform(work_of(p, blockIdx.x, s, blockIdx.z, BM, BN));
  if (w.row0 >= w.R) return;
  float* red_max = reinterpret_cast<float*>(smem + Smem::off_red);  // [2][BM]
  float* red_sum = red_max + 2 * BM;                                // [2][BM]
  if (w.ntiles == 0) {
    write_empty_split(p, w, s, tid, WS_THREADS);
    return;
  }
  const uint32_t sQ = base + Smem::off_q, sKV = base + Smem::off_kv, sP = base + Smem::off_p;
  uint8_t* pP = smem + Smem::off_p;
  const uint32_t bar0 = base + Smem::used;
  static_assert(Smem::used % 8 == 0, "mbarriers are 8-byte aligned");
  auto full = [&](int st) { return bar0 + 8u * st; };
  auto empty = [&](int st) { return bar0 + 16u + 8u * st; };
  // ASYM's mbarriers, in the P atom (which ASYM leaves unused; m_fin takes its first 256 B): p_full[st] = the S
  // warpgroup's P(j) and alpha(j) (tile j: completion j/2), a_free[st] = the V warpgroup has read alpha(j), fin = the
  // S warpgroup's row sums and final m_run.
  auto p_full = [&](int st) { return sP + 512u + 8u * st; };
  auto a_free = [&](int st) { return sP + 528u + 8u * st; };
  const uint32_t fin = sP + 544u;
  const bool asym_cta = MODE == 1 || (MODE == 2 && w.ntiles >= WS_ASYM_MIN_TILES);  // this CTA's consumers (w: uniform)
  if (tid == 0) {
    mbar_init(full(0), 128);
    mbar_init(full(1), 128);
    mbar_init(empty(0), WS_CONSUMERS);
    mbar_init(empty(1), WS_CONSUMERS);
    if (asym_cta) {  // a token-split CTA writes P over the P atom, so it gets none (an mbarrier's memory is not to
      // be reused without mbarrier.inval)
      for (int st = 0; st < 2; ++st) {
        mbar_init(p_full(st), 128);
        mbar_init(a_free(st), 128);
      }
      mbar_init(fin, 128);
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  // Producer (warpgroup 2). EARLY: Q and tile 0 are issued before the barrier that publishes the mbarriers' init (the
  // copies do not touch them), so their code sits near the kernel's entry, where a cold instruction fetch reaches it
  // first (session 23 call 2: the ASYM kernel's producer code lay 68 KB from the entry, and its first issue came ~2,400
  // cycles after the shipped kernel's); their arrival on full[0] is registered after the barrier. Session 24 call 4
  // (MODE 2, over the shipped kernel at B=1 L=4k): this form 1.021; only Q early 1.048; late in the token-split CTAs
  // 1.119 (their late producer code lies ~115 KB in: 2.9 us of cold fetch).
  int64_t slot[4];  // the producer's next slot ids (ws_issue_q / ws_issue_tile)
  if constexpr (EARLY) {
    if (grp == 2) {
      const WsRows r(tid - WS_CONSUMERS);
      ws_issue_q(p, w, r, sQ, slot);
      ws_issue_tile(p, w, r, sKV, 0, slot);
    }
  }
  __syncthreads();

  if (grp == 2) {  // ---- producer: tile t as soon as its stage is free ----
    asm volatile("setmaxnreg.dec.sync.aligned.u32 56;\n" ::: "memory");
    const WsRows r(tid - WS_CONSUMERS);
    if constexpr (EARLY)
      mbar_arrive_on_copies(full(0));  // Q and tile 0
    else
      ws_issue_q(p, w, r, sQ, slot);
    tr.mark(0);
    for (int t = EARLY ? 1 : 0; t < w.ntiles; ++t) {  // tile 0's arrival also covers Q
      if (t >= 2) mbar_wait(empty(t & 1), ((t >> 1) + 1) & 1);  // completion t/2 - 1: tile t-2's PV done
      tr.mark(1);
      ws_issue_tile(p, w, r, sKV, t, slot);
      mbar_arrive_on_copies(full(t & 1));
      tr.mark(2);
    }
    cp_async_wait<0>();  // no copy outlives its thread
    tr.mark(7);
    tr.flush(tid, grp, w.ntiles);
    return;
  }

  if (asym_cta) {
    // ---- ASYM: warpgroup 0 (the S warpgroup) runs S for the whole tile at m64n64, the softmax of its 64 rows and PV
    // for output dims 0..255; warpgroup 1 (the V warpgroup) only PV for dims 256..511, handed P(j) and the rows'
    // rescale alpha(j) through the mbarrier p_full[j & 1]. P(j) lives in tile j's rope atom (only S(j) reads it), so
    // the S warpgroup may start S(j+1) while the V warpgroup still runs PV(j). The arithmetic is the shipped
    // kernel's: the same lazy reference and CTA-wide exact step (voted over the S warpgroup's 128 threads), P and the
    // row sums per 32-token half in the same order, the same PV instructions; only S's wgmma shape differs.
    // Registers after setmaxnreg: S warpgroup 240 (O, S[64 x 64] and the softmax), V warpgroup 208 (O), producer 56.
    // Each branch holds its own setmaxnreg (code both run before it would cap both at the lower; the shared tail after
    // the loops, the fin handoff and write_rows, does not).
    float* alpha_buf = red_max;                   // [2][BM]: tile j's row rescale at (j & 1) BM (red_max unused)
    float* m_fin = reinterpret_cast<float*>(pP);  // [BM]: the final m_run (the P atom is unused here)
    const int r0 = wq * 16 + (lane >> 2);         // tile rows of this thread: r0 and r0 + 8
    float o[128];  // O[:, 256 grp .. +256]; initialized in each branch after its setmaxnreg
    if (grp == 0) {
      asm volatile("setmaxnreg.inc.sync.aligned.u32 240;\n" ::: "memory");
#pragma unroll
      for (int i = 0; i < 128; ++i) o[i] = 0.f;
      float m_run[2] = {-INFINITY, -INFINITY};
      float l_run[2][2] = {{0.f, 0.f}, {0.f, 0.f}};  // [32-token half][row h]
      int tok_row[2];
      draft_token_rows(p, w, r0, tok_row);
      const int64_t mask_base = p.mask_mode == 0 ? ld_idx(p.mask_indptr, p.mi_is64, blockIdx.z) : 0;
      const float sl_row[2] = {p.scale_log2, p.scale_log2};
      tr.mark(0);
      for (int j = 0; j < w.ntiles; ++j) {
        mbar_wait(full(j & 1), (j >> 1) & 1);  // tile j (and Q) landed
        fence_proxy_async();
        tr.mark(1);
        const uint32_t sK = sKV + (j & 1) * TILE, sPj = sK + 8 * ATOM;
        uint8_t* pPj = smem + Smem::off_kv + (j & 1) * TILE + 8 * ATOM;
        const bool draft = j >= w.n_pre;
        float sc[32];
        wgmma_fence();
        issue_qk64(sc, sQ, sK);
        wgmma_finish<32>(sc);
        tr.mark(2);
        float sh[2][16], alpha[2] = {1.f, 1.f};  // S's two 32-token halves; tile j's row rescale
        const bool exact_step = asym_scale_vote(sc, sh, m_run, alpha, p, w, j, sl_row, tok_row, mask_base, lane, tr);
        if (draft && !p.v_alias) {  // draft V rows from v_extend (dims 0..511; S(j) has read K)
          load_draft_v(p, w, j, sK, tid >> 2, tid & 3);
          load_draft_v(p, w, j, sK, (tid >> 2) + 32, tid & 3);
        }
        // PV(j) in two batches (E4, session 38; shipped in session 42: 0.972-0.991x on the loaded batched rows):
        // its first two k-steps (tokens 0..31) go out as soon as P's first half is written and run while this
        // warpgroup writes the second half (exp2, the P stores, the handoff); the last two follow. The same wgmmas
        // on the same accumulator in the same order as one batch, so the outputs are bitwise those of the one-batch
        // form. Every wait and branch sits before the first PV wgmma (a wait between two wgmmas of one accumulator
        // chain makes ptxas serialize them, C7520); each batch starts with its own wgmma.fence.
        if (j >= 2) mbar_wait(a_free(j & 1), ((j >> 1) + 1) & 1);  // the V warpgroup read alpha(j - 2)
        if ((lane & 3) == 0) {
          alpha_buf[(j & 1) * BM + r0] = alpha[0];
          alpha_buf[(j & 1) * BM + r0 + 8] = alpha[1];
        }
        if (exact_step) rescale_o(o, alpha);
        {
          float psum[2];
          write_p(pPj, sh[0], m_run, psum, 0, r0, lane, 1.f);
#pragma unroll
          for (int h = 0; h < 2; ++h)
            l_run[0][h] = exact_step ? l_run[0][h] * alpha[h] + psum[h] : l_run[0][h] + psum[h];
        }
        if (draft && !p.v_alias) cp_async_wait<0>();
        fence_proxy_async();
        tr.mark(5);
        fence_regs<128>(o);
        wgmma_fence();
        issue_pv_steps<0, 2>(o, sPj, sK, 0);
        wgmma_commit();
        {
          float psum[2];
          write_p(pPj, sh[1], m_run, psum, 1, r0, lane, 1.f);
#pragma unroll
          for (int h = 0; h < 2; ++h)
            l_run[1][h] = exact_step ? l_run[1][h] * alpha[h] + psum[h] : l_run[1][h] + psum[h];
        }
        fence_proxy_async();
        mbar_arrive(p_full(j & 1));  // P(j), alpha(j) and a draft tile's V rows to the V warpgroup
        wgmma_fence();  // a new batch (the first form, without this fence, gave nondeterministic outputs)
        issue_pv_steps<2, 2>(o, sPj, sK, 0);
        wgmma_finish<128>(o);
        mbar_arrive(empty(j & 1));
        tr.mark(6);
      }
      publish_row_sums(l_run[0], red_sum, 0, r0, lane);
      publish_row_sums(l_run[1], red_sum, 1, r0, lane);
      if ((lane & 3) == 0) {
        m_fin[r0] = m_run[0];
        m_fin[r0 + 8] = m_run[1];
      }
    } else {
      asm volatile("setmaxnreg.inc.sync.aligned.u32 208;\n" ::: "memory");
#pragma unroll
      for (int i = 0; i < 128; ++i) o[i] = 0.f;
      tr.mark(0);
      for (int j = 0; j < w.ntiles; ++j) {
        mbar_wait(p_full(j & 1), (j >> 1) & 1);  // P(j) and alpha(j)
        mbar_wait(full(j & 1), (j >> 1) & 1);  // complete already (the S warpgroup waited): this warpgroup's acquire
        fence_proxy_async();
        tr.mark(1);
        const uint32_t sK = sKV + (j & 1) * TILE;
        const float alpha[2] = {alpha_buf[(j & 1) * BM + r0], alpha_buf[(j & 1) * BM + r0 + 8]};
        mbar_arrive(a_free(j & 1));  // alpha(j) read: its buffer is free for tile j + 2
        rescale_o(o, alpha);  // skipped unless a row of the warp moved
        fence_regs<128>(o);
        wgmma_fence();
        issue_pv(o, sK + 8 * ATOM, sK, 1);
        wgmma_finish<128>(o);
        mbar_arrive(empty(j & 1));
        tr.mark(6);
      }
    }
    if (grp == 0) mbar_arrive(fin);  // the row sums and m_fin, to the V warpgroup and to itself
    mbar_wait(fin, 0);
    const float m_run[2] = {m_fin[r0], m_fin[r0 + 8]};
    write_rows(p, w, s, o, m_run, red_sum, grp, r0, lane);
    tr.mark(7);
    tr.flush(tid, grp, w.ntiles);
  } else {  // ---- consumers: the shipped bf16 kernel's tile loop without its loads ----
    asm volatile("setmaxnreg.inc.sync.aligned.u32 224;\n" ::: "memory");
    float o[128];
#pragma unroll
    for (int i = 0; i < 128; ++i) o[i] = 0.f;
    float m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.f, 0.f};
    const int r0 = wq * 16 + (lane >> 2);  // tile rows of this thread: r0 and r0 + 8
    int tok_row[2];
    draft_token_rows(p, w, r0, tok_row);
    const int64_t mask_base = p.mask_mode == 0 ? ld_idx(p.mask_indptr, p.mi_is64, blockIdx.z) : 0;
    const float sl_row[2] = {p.scale_log2, p.scale_log2};  // bf16 cache: every logit's log2-domain scale
    tr.mark(0);
    for (int j = 0; j < w.ntiles; ++j) {
      mbar_wait(full(j & 1), (j >> 1) & 1);  // tile j (and Q) landed
      fence_proxy_async();                   // the cp.async (generic proxy) writes it observed, before wgmma reads
      consumer_sync();                       // every consumer done with tile j-1 (P, the row maxima)
      tr.mark(1);
      const uint32_t sK = sKV + (j & 1) * TILE;
      const bool draft = j >= w.n_pre;

      // ---- S = Q K^T: 64 rows x tokens [32 grp, 32 grp + 32) ----
      float sc[16];
      wgmma_fence();
      issue_qk(sc, sQ, sK, grp);
      wgmma_finish<16>(sc);
      tr.mark(2);

      // ---- scale + mask, row max over this warpgroup's 32 columns ----
      float tmax[2];
      scale_mask(sc, tmax, p, w, j, sl_row, tok_row, mask_base, grp, lane);
      // ---- lazy softmax (mla_verify_wgmma.cuh), the block barriers as consumer barriers ----
      const bool over = publish_row_max(tmax, m_run, red_max, grp, r0, lane, LAZY_TAU);
      float psum[2];
      if (!over) write_p(pP, sc, m_run, psum, grp, r0, lane, 1.f);
      fence_proxy_async();
      tr.mark(3);
      const bool exact_step = consumer_sync_or(over);
      tr.mark(4);
      if (draft && !p.v_alias) load_draft_v(p, w, j, sK, tid >> 2, tid & 3);  // draft V rows from v_extend
      settle_softmax<false>(exact_step, pP, sc, m_run, l_run, psum, o, red_max, grp, r0, lane, 1.f);
      if (draft && !p.v_alias) cp_async_wait<0>();
      if (exact_step || (draft && !p.v_alias)) {
        fence_proxy_async();
        consumer_sync();  // the rewritten P (and a reloaded draft V) visible to wgmma
      }
      tr.mark(5);

      // ---- O[:, 256 grp .. +256] += P V, then the stage goes back to the producer ----
      fence_regs<128>(o);
      wgmma_fence();
      issue_pv(o, sP, sK, grp);
      wgmma_finish<128>(o);
      mbar_arrive(empty(j & 1));
      tr.mark(6);
    }

    // ---- finalize: row sums of both halves, normalized output or split partial ----
    publish_row_sums(l_run, red_sum, grp, r0, lane);
    consumer_sync();
    if constexpr (STAGE) {  // every S read of Q is done (the barrier above): the staging lies over it
      stage_rows_bf16(smem + Smem::off_q, p, w, s, o, m_run, red_sum, grp, r0, lane);
      consumer_sync();
      store_rows_bf16(smem + Smem::off_q, p, w, s, tid);
    } else {
      write_rows(p, w, s, o, m_run, red_sum, grp, r0, lane);
    }
    tr.mark(7);
    tr.flush(tid, grp, w.ntiles);
  }
}

}  // namespace wg
}  // namespace mlav
