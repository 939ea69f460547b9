// sm_90a split kernel of the MLA verify attention: warpgroup MMA (wgmma) with both operands in
// 128-byte-swizzled shared memory, replacing mma.sync + ldmatrix of the generic kernel.
//
// CTA = 2 warpgroups (256 threads), BM = 64 packed rows, BN = 64 KV tokens, 2 cp.async stages.
// Shared memory (from a 1024-byte aligned base): Q [64 x 576] bf16 and two KV tiles [64 x 576],
// each stored as nine column atoms of 64 dims (atom = 64 rows x 128 B = 8 KiB, 16-byte chunk c of
// row r at r*128 + ((c ^ r%8) << 4), the hardware's 128B swizzle); P [64 x 64] bf16 (one atom);
// fp32 row max / row sum exchange [2][64] each.
//   S = Q K^T : warpgroup g computes all 64 rows x tokens [32g, 32g+32) (36 x m64n32k16, A = Q
//               and B = K both K-major); row maxima of the two halves are exchanged in smem.
// Softmax against a lazy reference: both warpgroups write P at the shared running max m_run while
// no row's max exceeds it by more than 2^LAZY_TAU, so a tile needs two block barriers (tile in,
// P out: the second also ORs the "exceeded" votes); an exceeded tile takes the exact step (new
// m_run from both halves, P rewritten, O and l rescaled) behind a third. Measured on the H200
// (session 9, same process): 0.96x the time of the three-barrier form on the loop-bound shapes.
//   O += P V  : warpgroup g owns output columns [256g, 256g+256): 4 x m64n256k16 with A = P
//               (K-major) and B = V = dims 0..511 of the same KV tile read N-major (no copy).
// O lives in registers (128 fp32 per thread); softmax in the log2 domain as in the generic kernel.
// Loads are cp.async (a paged gather: TMA tile loads cannot follow kv_indices on sm_90), 8 lanes
// per row so one instruction moves 4 rows x 128 contiguous bytes (session 10: 0.83-0.93x the time
// of 4 lanes on the loop-bound shapes); every writer issues fence.proxy.async before the barrier
// that hands smem to the async (wgmma) proxy. The tile-level pieces (QK / PV issue, the lazy
// softmax steps) are in wgmma_tile_sm90.cuh, shared with the DSA w64 kernel.
// FP8 = true (fp8 e4m3fn cache): prefix tiles go global -> registers (16-byte loads, issued where
// the bf16 kernel issues its cp.async) and registers -> bf16 smem while PV of the current tile
// runs; prefix logits are scaled by k_scale and prefix P by v_scale (draft rows are bf16).
// F16 = true (an fp8 kernel; the host picks it per launch, p.fp8_f16): the prefix tiles' rows go to
// f16 smem instead (one cvt.rn.f16x2.e4m3x2 per two values, exact, where the bf16 decode takes
// five instructions) and their wgmmas are f16: Q is rewritten in place as f16 of q x 2^e[r] before
// the loop (q_to_f16, exact; S is scaled back by 2^-e[r] in fp32) and P is written in f16
// (P <= 2^LAZY_TAU x v_scale: the host keeps v_scale <= api.FP8_MAX_V_SCALE). The draft tile (bf16
// rows) runs in bf16: Q is converted back first (q_f16_to_bf16, exact). The prefix and draft tiles
// are two loops, not a branch per tile: ptxas serializes every wgmma behind a branch between the
// two arithmetics (C7520). It pays where a CTA holds many prefix tiles (its Q conversion is per
// CTA): measured in sessions 17 and 18 (docs/kernels/dense-verify-notes.md).
// p.fp8_sched places the fp8 register loads of tile j+1 and their smem store (measured side by side):
//   0: loads after S(j) is issued, store while PV(j) runs (the loads have S + softmax to land);
//   1: loads before S(j) is issued, store while PV(j) runs;
//   2: loads before S(j) is issued, store after PV(j) completes (the whole iteration to land, the
//      conversion not overlapped with the tensor cores).
// A PV(j)/S(j+1) overlap variant (no wait after PV, wgmma.wait_group 1 after the next S) was
// tried at c067e24 and removed: ptxas serialized all its wgmmas (C7514, every HGMMA followed by
// WARPGROUP.DEPBAR), so its measured slowdown says nothing about the schedule
// (docs/kernels/dense-verify-notes.md, v4).
#pragma once
#include "mla_verify_kernel.cuh"
#include "wgmma_tile_sm90.cuh"

namespace mlav {
namespace wg {
using namespace sm90wg;

constexpr int BM = 64, BN = 64, STAGES = 2, THREADS = 256;
// Lazy softmax reference (log2 units): P is computed against the shared m_run while no row's max
// exceeds it by more than this, so P <= 2^8 (bf16 keeps its relative precision; fp32 O and l stay
// far from overflow).
constexpr float LAZY_TAU = 8.f;
constexpr int ATOM = 8192;      // one 64-dim column block of a 64-row tile (bytes)
constexpr int TILE = 9 * ATOM;  // 73,728 B: 64 rows x 576 dims
struct Smem {
  static constexpr int off_q = 0;
  static constexpr int off_kv = TILE;
  static constexpr int off_p = off_kv + STAGES * TILE;
  static constexpr int off_red = off_p + ATOM;
  static constexpr int used = off_red + 4 * BM * 4;
  static constexpr int bytes = used + 1024;  // slack to align the base to 1024 B (swizzle period)
};

// Byte offset of 16-byte chunk ch (0..71) of row r (0..63) in a [64 x 576] tile.
__device__ __forceinline__ uint32_t tile_off(int r, int ch) {
  return (uint32_t)((ch >> 3) * ATOM + r * 128 + (((ch & 7) ^ (r & 7)) << 4));
}

// One bf16 row (72 chunks) of a [64 x 576] tile by 8 lanes, cp.async: lane sub8 copies chunks sub8 + 8 it (it < 9),
// which lie in atom it at the row's swizzled position of chunk sub8, off = tile_off(r, sub8). Rows that share r % 8
// on a warp's four 8-lane groups move 4 rows x 128 contiguous bytes per instruction. ok = false: 0-byte copies
// (the row's smem zero-filled, src still a valid base).
__device__ __forceinline__ void copy_row8(uint32_t tile, uint32_t off, const __nv_bfloat16* src, int sub8, bool ok) {
  const __nv_bfloat16* g = src + sub8 * 8;
#pragma unroll
  for (int it = 0; it < 9; ++it) cp_async16(tile + it * ATOM + off, g + it * 64, ok ? 16 : 0);
}

// The power of two q_row_to_f16 scales a row by: e = 14 - ilogb(mx) clamped to +-120 (mx = the row's largest |q|; 0
// for a zero row; inf / NaN: ilogbf is huge, e clamps low).
__device__ __forceinline__ int q_f16_exp(float mx) {
  int e = 0;
  if (mx > 0.f) e = 14 - ilogbf(mx);
  return max(-120, min(120, e));
}
// Eight bf16 (one 16-byte chunk) times sc as eight f16, rounded to nearest.
__device__ __forceinline__ uint4 bf16x8_to_f16x8_scaled(uint4 v, float sc) {
  const uint32_t u[4] = {v.x, v.y, v.z, v.w};
  uint32_t h[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const __half2 x = __floats2half2_rn(__uint_as_float(u[i] << 16) * sc, __uint_as_float(u[i] & 0xffff0000u) * sc);
    h[i] = *reinterpret_cast<const uint32_t*>(&x);
  }
  return make_uint4(h[0], h[1], h[2], h[3]);
}
// Largest |value| of eight bf16 (one 16-byte chunk) and mx.
__device__ __forceinline__ float bf16x8_absmax(uint4 v, float mx) {
  const uint32_t u[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i)
    mx = fmaxf(mx, fmaxf(fabsf(__uint_as_float(u[i] << 16)), fabsf(__uint_as_float(u[i] & 0xffff0000u))));
  return mx;
}

// F16 kernel: one Q row's 16-byte chunks that this thread holds (NCH of them at q + off(i), i < NCH; the row's
// other chunks are held by the LANES - 1 neighbouring lanes of an aligned group) rewritten in place as f16 of
// q x 2^e, e = 14 - ilogb(max_d |q[d]|) clamped to +-120: a power of two, exact wherever the product is an f16
// normal (the row's largest |value| lands in [2^14, 2^15)). Returns 2^-e (S is scaled back by it in fp32). Every
// lane of the warp calls it (xor shuffles over the group).
template <int NCH, int LANES, typename Off>
__device__ __forceinline__ float q_row_to_f16(uint8_t* q, Off off) {
  uint4 v[NCH];
  float mx = 0.f;
#pragma unroll
  for (int it = 0; it < NCH; ++it) {
    v[it] = *reinterpret_cast<const uint4*>(q + off(it));
    mx = bf16x8_absmax(v[it], mx);
  }
#pragma unroll
  for (int o = LANES / 2; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
  const int e = q_f16_exp(mx);
  const float sc = __int_as_float((127 + e) << 23);
#pragma unroll
  for (int it = 0; it < NCH; ++it) *reinterpret_cast<uint4*>(q + off(it)) = bf16x8_to_f16x8_scaled(v[it], sc);
  return __int_as_float((127 - e) << 23);
}

// q_row_to_f16 undone on the same chunks: bf16 of the f16 value x inv (exact: the f16 held the bf16 value times
// a power of two). UNROLL bounds the unrolling (called inside the tile loop, where O holds the registers).
template <int NCH, int UNROLL, typename Off>
__device__ __forceinline__ void q_row_to_bf16(uint8_t* q, Off off, float inv) {
#pragma unroll UNROLL
  for (int it = 0; it < NCH; ++it) {
    uint4* ptr = reinterpret_cast<uint4*>(q + off(it));
    const uint4 v = *ptr;
    const uint32_t u[4] = {v.x, v.y, v.z, v.w};
    uint32_t b[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float2 x = __half22float2(*reinterpret_cast<const __half2*>(&u[i]));
      const __nv_bfloat162 y = __floats2bfloat162_rn(x.x * inv, x.y * inv);
      b[i] = *reinterpret_cast<const uint32_t*>(&y);
    }
    *ptr = make_uint4(b[0], b[1], b[2], b[3]);
  }
}

// F16 kernel: the Q chunks this thread copied (rows l8 and l8 + 32, chunks sub8 + 8 it, it < 9, at q + it ATOM +
// off8[k]) rewritten in place as f16 (q_row_to_f16: a row's 72 chunks are held by 8 consecutive lanes, so no block
// barrier is needed before it: each thread waited for its own cp.async); qinv[r] = 2^-e[r].
__device__ __forceinline__ void q_to_f16(uint8_t* q, const uint32_t off8[2], int l8, int sub8, float* qinv) {
#pragma unroll 1
  for (int k = 0; k < 2; ++k) {
    const uint32_t off = k ? off8[1] : off8[0];
    const float inv = q_row_to_f16<9, 8>(q, [&](int it) { return it * ATOM + off; });
    if (sub8 == 0) qinv[l8 + 32 * k] = inv;
  }
}

// F16 kernel, before the draft tile: q_to_f16 undone. Needs every wgmma read of the f16 Q complete (a block
// barrier before it) and one after it.
__device__ __forceinline__ void q_f16_to_bf16(uint8_t* q, uint32_t off0, uint32_t off1, int l8, const float* qinv) {
#pragma unroll 1  // inside the loop, where O holds 128 registers
  for (int k = 0; k < 2; ++k) {
    const uint32_t off = k ? off1 : off0;
    q_row_to_bf16<9, 3>(q, [&](int it) { return it * ATOM + off; }, qinv[l8 + 32 * k]);
  }
}

// S of KV tile j in place (this thread's 16 logits, rows r0 and r0 + 8 of the tile): scaled to the log2 domain
// (prefix tokens by sl_row[h], draft tokens by p.scale_log2) and masked (-inf past the tile's range or outside
// the draft mask); tmax = the two rows' maxima over this thread's columns.
__device__ __forceinline__ void scale_mask(float (&sc)[16], float (&tmax)[2], const Params& p, const Work& w, int j,
                                           const float (&sl_row)[2], const int (&tok_row)[2], int64_t mask_base,
                                           int grp, int lane) {
  const bool draft = j >= w.n_pre;
  tmax[0] = tmax[1] = -INFINITY;
  const int t_start = draft ? (j - w.n_pre) * BN : w.pb + j * BN;
  const int t_end = draft ? w.n_b : w.pe;
  if (!draft && t_start + BN <= t_end) {  // full prefix tile (the common case): scale only
#pragma unroll
    for (int e = 0; e < 16; ++e) {
      sc[e] *= sl_row[(e >> 1) & 1];
      tmax[(e >> 1) & 1] = fmaxf(tmax[(e >> 1) & 1], sc[e]);
    }
  } else {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int h = e >> 1;
        const int t = t_start + grp * 32 + i * 8 + 2 * (lane & 3) + (e & 1);
        bool vis = t < t_end;
        if (draft && vis && tok_row[h] >= 0) vis = draft_visible(p, mask_base, w, tok_row[h], t);
        const float v = vis ? sc[4 * i + e] * (draft ? p.scale_log2 : sl_row[h]) : -INFINITY;
        sc[4 * i + e] = v;
        tmax[h] = fmaxf(tmax[h], v);
      }
    }
  }
}

// Tile row r's sum over both warpgroups' halves (red_sum [2][BM], publish_row_sums) and the output's factor 1 / l (0
// for an empty row).
__device__ __forceinline__ float row_sum(const float* red_sum, int r) { return red_sum[r] + red_sum[BM + r]; }
__device__ __forceinline__ float row_inv(float l) { return l > 0.f ? 1.f / l : 0.f; }

// Split s's log2-sum-exp of tile row r, m + log2(l) (-inf: empty), where S > 1; by one thread per row (warpgroup 0's
// lanes 4k).
__device__ __forceinline__ void put_split_lse(const Params& p, const Work& w, int s, int r, float m, float l, int grp,
                                              int lane) {
  if (w.S > 1 && grp == 0 && (lane & 3) == 0)
    p.ws_lse[(int64_t)s * p.T * p.H + w.grow0 + r] = l > 0.f ? m + log2f(l) : -INFINITY;
}

// The split's rows out, after the barrier that follows publish_row_sums: O [64 x 256] of warpgroup grp (its
// output columns 256 grp ..) over l = both warpgroups' row sums, normalized (S = 1) or as the split's partial
// with its log2-sum-exp m_run + log2(l) (S > 1); padded rows write nothing.
__device__ __forceinline__ void write_rows(const Params& p, const Work& w, int s, const float* o,
                                           const float (&m_run)[2], const float* red_sum, int grp, int r0, int lane) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int r = r0 + 8 * h;
    if (w.row0 + r >= w.R) continue;
    const float l = row_sum(red_sum, r), inv = row_inv(l);
    const RowOut ro = row_out(p, w, s, r);
#pragma unroll
    for (int i = 0; i < 32; ++i) ro.put(grp * 256 + i * 8 + 2 * (lane & 3), o[4 * i + 2 * h] * inv, o[4 * i + 2 * h + 1] * inv);
    put_split_lse(p, w, s, r, m_run[h], l, grp, lane);
  }
}

// Diagnostic build only (nvcc -DMLAV_TRACE=1, tests/device/dense_trace.py; never in a shipped build): thread 0 of each
// warpgroup sums SM cycles (clock, 32 bits per CTA) per phase of the split kernel and adds them to trace_acc at its end:
// [warpgroup][TRACE_SLOTS] = prologue, per tile: tile wait + barrier 1, S (issue to wait, the next tile's loads
// issued inside; the F16 kernel's Q conversion back before the draft tile), scale / max / P write, barrier 2, exact
// step (+ barrier 3), PV (+ the fp8 store), then epilogue, tiles, CTAs. Row 2 is the warp-specialized kernel's
// producer (mla_verify_wgmma_ws.cuh: its own slots, zero for this kernel). The shipped build compiles none of it.
#ifndef MLAV_TRACE
#define MLAV_TRACE 0
#endif
constexpr int TRACE_SLOTS = 10;
#if MLAV_TRACE
// Each clock read gets trace_zero (never written: 0, but loaded, so unknown to ptxas) added. Without it ptxas may
// rematerialize t, the last mark's plain clock read, as a fresh read where it is used: session 45's trace build did so
// at the S warpgroup's PV mark in the ASYM kernels (a read right after that mark's own one, so the slot summed
// negative; seen in the SASS, verify_tools.sass). tests/kernels/test_trace_sass.py checks the build for such pairs.
__device__ unsigned long long trace_acc[3 * TRACE_SLOTS];
__device__ uint32_t trace_zero;
struct PhaseTrace {
  uint32_t z = *(volatile uint32_t*)&trace_zero;
  uint32_t t = (uint32_t)clock() + z, acc[TRACE_SLOTS] = {};  // 32-bit SM cycles: differences wrap correctly
  __device__ void mark(int slot) {  // the cycles since the last mark into slot
    const uint32_t now = (uint32_t)clock() + z;
    acc[slot] += now - t;
    t = now;
  }
  __device__ void flush(int tid, int grp, int ntiles) {  // thread 0 of each warpgroup adds its sums
    acc[8] = ntiles;
    acc[9] = 1;
    if ((tid & 127) == 0)
      for (int i = 0; i < TRACE_SLOTS; ++i) atomicAdd(&trace_acc[grp * TRACE_SLOTS + i], (unsigned long long)acc[i]);
  }
};
#else
struct PhaseTrace {
  __device__ void mark(int) {}
  __device__ void flush(int, int, int) {}
};
#endif

// An empty split (no KV tile): the -inf log2-sum-exp sentinel of its rows, nothing else.
__device__ __forceinline__ void write_empty_split(const Params& p, const Work& w, int s, int tid, int nthreads) {
  for (int r = tid; r < BM; r += nthreads)
    if (w.row0 + r < w.R) p.ws_lse[(int64_t)s * p.T * p.H + w.grow0 + r] = -INFINITY;
}

// Draft token of this thread's rows r0 and r0 + 8 (-1: a padded row).
__device__ __forceinline__ void draft_token_rows(const Params& p, const Work& w, int r0, int (&tok_row)[2]) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int gr = w.row0 + r0 + 8 * h;
    tok_row[h] = gr < w.R ? gr / p.H : -1;
  }
}

// Draft tile j: dims 0..511 of its rows from v_extend into the stage at sK (thread tid < 256: row tk = tid / 4,
// chunks lsub + 4 it, lsub = tid % 4), committed as one cp.async group; rows past the drafts are zero-filled.
__device__ __forceinline__ void load_draft_v(const Params& p, const Work& w, int j, uint32_t sK, int tk, int lsub) {
  bool ok;
  const __nv_bfloat16* src = v_src(p, w, j, BN, tk, ok);
  for (int it = 0; it < V_CHUNKS / 4; ++it) {
    const int ch = lsub + 4 * it;
    cp_async16(sK + tile_off(tk, ch), ok ? src + ch * 8 : src, ok ? 16 : 0);
  }
  cp_async_commit();
}

// After the barrier that ORs the exact-step votes: the exact step (new m_run from both warpgroups' maxima, P
// rewritten, l and O rescaled) or the lazy one (l += this tile's row sums).
template <bool F16>
__device__ __forceinline__ void settle_softmax(bool exact_step, uint8_t* pP, const float (&sc)[16], float (&m_run)[2],
                                               float (&l_run)[2], float (&psum)[2], float* o, const float* red_max,
                                               int grp, int r0, int lane, float vs) {
  if (exact_step) {
    float alpha[2];
    exact_max(m_run, alpha, red_max, r0);
    write_p<F16>(pP, sc, m_run, psum, grp, r0, lane, vs);
#pragma unroll
    for (int h = 0; h < 2; ++h) l_run[h] = l_run[h] * alpha[h] + psum[h];
    rescale_o(o, alpha);
  } else {
#pragma unroll
    for (int h = 0; h < 2; ++h) l_run[h] += psum[h];
  }
}

// GATED: the instance a gated pair launches (p.fp8_gate; mla_verify.cu), a separate one so that the plain instances'
// machine code carries no gate.
template <bool FP8, bool F16 = false, bool GATED = false>
__global__ void __launch_bounds__(THREADS, 1) mla_verify_split_wgmma_kernel(const Params p) {
  static_assert(FP8 || !F16, "the f16 path is an fp8 kernel's");
  static_assert(FP8 || !GATED, "only fp8 kernels are gated");
  extern __shared__ __align__(1024) uint8_t smem_raw[];
  const uint32_t raw = smem_u32(smem_raw);
  const uint32_t base = (raw + 1023u) & ~1023u;
  uint8_t* smem = smem_raw + (base - raw);
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int grp = warp >> 2, wq = warp & 3;  // warpgroup, warp within it (rows 16wq..16wq+15)
  const int s = blockIdx.y;
  PhaseTrace tr;
  pdl_signal(p);
  const Work w = work_of(p, blockIdx.x, s, blockIdx.z, BM, BN, GATED);
  if (GATED) fp8_gate_order(p, w.row0 >= w.R);
  if (w.row0 >= w.R) return;
  float* red_max = reinterpret_cast<float*>(smem + Smem::off_red);  // [2][BM]
  float* red_sum = red_max + 2 * BM;                                // [2][BM]
  if (w.ntiles == 0) {
    write_empty_split(p, w, s, tid, THREADS);
    if (GATED) fp8_gate_order_end(p);
    return;
  }
  const uint32_t sQ = base + Smem::off_q, sKV = base + Smem::off_kv, sP = base + Smem::off_p;
  uint8_t* pP = smem + Smem::off_p;

  // Loaders (one slot lookup per row and tile). The smem and global offsets of a chunk are
  // compile-time constants past per-thread bases; a row that must not be read keeps its (valid)
  // base pointer and copies 0 bytes (zero-fill). fp8 prefix tiles and draft V rows: thread -> row
  // lr = tid/4, pieces lsub + 4i.
  const int lr = tid >> 2, lsub = tid & 3;
  // bf16 Q and KV rows (cp.async): 8 lanes per row, rows l8 and l8 + 32, chunks sub8 + 8 it (it < 9):
  // chunk sub8 + 8 it lies in atom it at the row's swizzled position of chunk sub8 (both rows share
  // l8 % 8), so each instruction moves 4 rows x 128 contiguous bytes. Measured against 4 lanes per
  // row (64 bytes) on the H200 (session 10, same process, bitwise equal outputs): 0.831x the time at
  // (4, 131072, 4, 16), 0.928 at B=8 L=32k, 0.926 at B=32 L=8k, 0.98-0.99 at B=1.
  const int l8 = tid >> 3, sub8 = tid & 7;
  const uint32_t off8[2] = {(uint32_t)(l8 * 128 + ((sub8 ^ (l8 & 7)) << 4)),
                            (uint32_t)((l8 + 32) * 128 + ((sub8 ^ (l8 & 7)) << 4))};
  int64_t next_slot8[2];
#pragma unroll
  for (int k = 0; k < 2; ++k) {
    bool ok;
    const __nv_bfloat16* src = q_src(p, w, l8 + 32 * k, ok);
    copy_row8(sQ, off8[k], src, sub8, ok);
    next_slot8[k] = FP8 ? -1 : tile_slot(p, w, 0, BN, l8 + 32 * k);  // fp8: tile 0 is an fp8 (or a draft) tile
  }
  int64_t next_slot = FP8 ? tile_slot(p, w, 0, BN, lr) : -1;  // fp8 prefix tiles: row lr's slot, next tile
  // fp8 prefix tile: 16-byte piece lsub + 4 it (it < 9) of the row = bf16 chunks 2c, 2c+1 of atom it.
  uint4 f8[FP8 ? 9 : 1];
  int f8_stage = -1;
  bool f8_ok = false;  // the registers hold a readable row (else the store writes zeros)
  const uint32_t f8_even = lr * 128 + (((2 * lsub) ^ (lr & 7)) << 4), f8_odd = lr * 128 + (((2 * lsub + 1) ^ (lr & 7)) << 4);
  auto store_fp8 = [&]() {
    if constexpr (FP8) {
      if (f8_stage >= 0) {
        const uint32_t tile = sKV + f8_stage * TILE;
        // An unreadable row: the decode multiplies by 0 (in place of 36 SELs per store). Session 17, H200, fp8,
        // time vs the SELs: 0.975-0.978 at (4, 131072, 4, 16), B=8 L=32k, B=32 L=8k; 0.987 B=1 L=32k, 1.012 B=1 L=4k.
        if constexpr (F16) {  // one conversion per two values; an unreadable row stored as zeros
#pragma unroll
          for (int it = 0; it < 9; ++it) {
            const uint4 v = f8_ok ? f8[it] : make_uint4(0u, 0u, 0u, 0u);
            st_shared_v4(tile + it * ATOM + f8_even, fp8x8_to_f16x8(v.x, v.y));
            st_shared_v4(tile + it * ATOM + f8_odd, fp8x8_to_f16x8(v.z, v.w));
          }
        } else {
          const uint32_t kf = f8_ok ? FP8_BF16_RESCALE : 0u;
#pragma unroll
          for (int it = 0; it < 9; ++it) {
            st_shared_v4(tile + it * ATOM + f8_even, fp8x8_to_bf16x8(f8[it].x, f8[it].y, kf));
            st_shared_v4(tile + it * ATOM + f8_odd, fp8x8_to_bf16x8(f8[it].z, f8[it].w, kf));
          }
        }
        f8_stage = -1;
      }
    }
  };
  // bf16 tile j's row l8 + 32 k into stage `stage`; ok_all = false copies zeros (j past the split's tiles).
  auto load_row8 = [&](int j, int stage, int k, bool ok_all) {
    bool ok;
    const __nv_bfloat16* src = kv_src(p, w, j, BN, l8 + 32 * k, next_slot8[k], ok);
    next_slot8[k] = tile_slot(p, w, j + 1, BN, l8 + 32 * k);
    copy_row8(sKV + stage * TILE, off8[k], src, sub8, ok && ok_all);
  };
  auto load_tile = [&](int j, int stage) {          // tiles are loaded in order 0, 1, 2, ...
#ifdef MLAV_DIAG_NOLOAD
    // Timing diagnostic, never in a shipped build (nvcc -DMLAV_DIAG_NOLOAD=1 in a copy of csrc/ run
    // by bench --tree-ab): no KV load from tile 2 on, the stages keep tiles 0 and 1, so a timing
    // shows the kernel's compute and synchronization without its memory traffic; the output is wrong.
    if (MLAV_DIAG_NOLOAD && j >= 2) return;
#endif
    if constexpr (FP8) {
      if (j < w.n_pre) {
        const int64_t slot = next_slot;
        if constexpr (!F16) next_slot = tile_slot(p, w, j + 1, BN, lr);
        const bool ok = slot >= 0 && slot < p.num_slots;
        const uint4* src = reinterpret_cast<const uint4*>(p.kbuf8 + (ok ? slot : 0) * p.kb_st) + lsub;
        // slot 0 exists: the load is always in bounds. An unreadable row is zeroed at the store (store_fp8), not
        // by a select right after the loads, which made the warp wait for them at once (Nsight Compute,
        // (4, 131072, 4, 16): 23% of the stall samples on it). Session 16 call 1, H200, fp8, time vs the select:
        // 0.857-0.862 at (4, 131072, 4, 16), B=8 L=32k, B=32 L=8k, 0.907 at B=1 L=32k, 1.002 at B=1 L=4k.
#pragma unroll
        for (int it = 0; it < 9; ++it) f8[it] = __ldg(src + 4 * it);
        // F16: the next tile's slot after this tile's loads. Loaded first, its register could not be next_slot's
        // (still feeding the address) and a move on the fresh value waited for the load (Nsight Compute, session
        // 17: 29% of the stall samples of the f16 path).
        if constexpr (F16) next_slot = tile_slot(p, w, j + 1, BN, lr);
        f8_ok = ok;
        f8_stage = stage;
        return;
      }
    }
#pragma unroll
    for (int k = 0; k < 2; ++k) load_row8(j, stage, k, true);
  };
  load_tile(0, 0);
  if constexpr (F16) {
    // The prefix tiles' wgmmas take f16 Q; red_sum[0..BM) holds qinv until the finalize (read after the loop's
    // first barrier). Converted while tile 0's fp8 rows are still in flight.
    cp_async_commit();
    if (w.n_pre > 0) {
      cp_async_wait<0>();  // this thread's Q chunks landed (tile 0 is an fp8 tile: register loads)
      q_to_f16(smem + Smem::off_q, off8, l8, sub8, red_sum);
    }
    store_fp8();
  } else {
    store_fp8();
    cp_async_commit();
  }
  const float sl_pre = FP8 ? p.scale_log2 * p.k_scale : p.scale_log2;  // log2-domain scale of prefix logits
  const float vs_pre = FP8 ? p.v_scale : 1.f;                         // V dequantization folded into P

  float o[128];
#pragma unroll
  for (int i = 0; i < 128; ++i) o[i] = 0.f;
  float m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.f, 0.f};
  const int r0 = wq * 16 + (lane >> 2);  // tile rows of this thread: r0 and r0 + 8
  int tok_row[2];
  draft_token_rows(p, w, r0, tok_row);
  const int64_t mask_base = p.mask_mode == 0 ? ld_idx(p.mask_indptr, p.mi_is64, blockIdx.z) : 0;

  // One KV tile (S, softmax, PV); the tag (std::true_type: an F16 kernel's prefix tiles) picks the f16 wgmmas and P.
  // Two loops, not a branch per tile: ptxas serializes every wgmma behind a branch that selects between them (C7520).
  tr.mark(0);
  auto tile_step = [&](int j, auto f16_tag) {
    cp_async_wait<0>();
    fence_proxy_async();
    __syncthreads();  // tile j (and Q) visible to wgmma; every warp done with tile j-1
    tr.mark(1);
    const uint32_t sK = sKV + (j & 1) * TILE;
    constexpr bool f16 = decltype(f16_tag)::value;  // this tile's wgmmas take f16 operands (an fp8 prefix tile)
    float sl_row[2];  // log2-domain scale of rows r0, r0 + 8's prefix logits (f16 Q: times qinv[r])
#pragma unroll
    for (int h = 0; h < 2; ++h) sl_row[h] = f16 ? sl_pre * red_sum[r0 + 8 * h] : sl_pre;
    const bool draft = j >= w.n_pre;
    if constexpr (F16) {
      if (j == w.n_pre && j > 0) {  // the draft tile after f16 prefix tiles: Q back to bf16
        q_f16_to_bf16(smem + Smem::off_q, off8[0], off8[1], l8, red_sum);
        fence_proxy_async();
        __syncthreads();
      }
    }
    const bool early = FP8 && p.fp8_sched != 0;  // fp8: issue tile j+1's loads before S(j)
    if (early && j + 1 < w.ntiles) load_tile(j + 1, (j + 1) & 1);

    // ---- S = Q K^T: 64 rows x tokens [32 grp, 32 grp + 32); tile j+1's loads issue meanwhile ----
    float sc[16];  // not zeroed: the first wgmma overwrites it (scale-d = 0); a zeroing store here
                   // would define accumulator registers while PV(j-1) runs (ptxas then serializes)
    wgmma_fence();
    if constexpr (!FP8) {
      // bf16: tile j+1's two rows of cp.async between thirds of the chain, past the last tile as 0-byte copies
      // (no branch around them: a branch between wgmmas can serialize them, C7520). Issued after the chain's
      // commit they added ~430 cycles to the S phase (trace, B=8 L=32k: 2,276 with the gather, 1,844 without).
      // Session 20 call 4, H200, same process, time vs loads after the commit (bitwise equal outputs):
      // 0.989 (4, 131072, 4, 16), 0.992 B=8 L=32k, 0.993 B=32 L=8k, 0.996 B=1 L=32k, 0.995 B=1 L=4k.
      const bool more = j + 1 < w.ntiles;
      issue_qk_steps<0, 12>(sc, sQ, sK, grp);
      load_row8(j + 1, (j + 1) & 1, 0, more);
      issue_qk_steps<12, 12, false, true>(sc, sQ, sK, grp);
      load_row8(j + 1, (j + 1) & 1, 1, more);
      issue_qk_steps<24, 12, false, true>(sc, sQ, sK, grp);
      wgmma_commit();
    } else {
      if constexpr (f16)
        issue_qk_steps<0, 576 / 16, true>(sc, sQ, sK, grp);
      else
        issue_qk(sc, sQ, sK, grp);
      wgmma_commit();
      if (!early && j + 1 < w.ntiles) load_tile(j + 1, (j + 1) & 1);
    }
    cp_async_commit();
    wgmma_wait0();
    fence_regs<16>(sc);
    tr.mark(2);

    // ---- scale + mask, row max over this warpgroup's 32 columns ----
    float tmax[2];
    scale_mask(sc, tmax, p, w, j, sl_row, tok_row, mask_base, grp, lane);
    // ---- online softmax against a lazy reference max: both warpgroups hold the same m_run. While
    // no row's max exceeds it by more than LAZY_TAU (log2 units: P <= 2^LAZY_TAU) each warpgroup
    // writes its P at m_run without waiting for the other's maxima, and one barrier, which also ORs
    // the "exceeded" votes, hands P to wgmma. Otherwise (the first tile, a rising max) every thread
    // takes the exact step: m_run = max(m_run, both halves' maxima), P rewritten, O and l rescaled,
    // a second barrier. m_run changes only there, from the same smem maxima, so it stays equal in
    // both warpgroups; lse = m_run + log2(l) as before (l is relative to m_run). ----
    const bool over = publish_row_max(tmax, m_run, red_max, grp, r0, lane, LAZY_TAU);
    float psum[2];
    const float vs = draft ? 1.f : vs_pre;
    if (!over) {
      if constexpr (f16)
        write_p<true>(pP, sc, m_run, psum, grp, r0, lane, vs);
      else
        write_p(pP, sc, m_run, psum, grp, r0, lane, vs);
    }
    fence_proxy_async();
    tr.mark(3);
    // every thread's P and maxima visible; both warpgroups done reading K of this tile
    const bool exact_step = __syncthreads_or(over);
    tr.mark(4);
    if (draft && !p.v_alias) load_draft_v(p, w, j, sK, lr, lsub);  // dims 0..511 of the draft rows: v_extend
    settle_softmax<f16>(exact_step, pP, sc, m_run, l_run, psum, o, red_max, grp, r0, lane, vs);
    if (draft && !p.v_alias) cp_async_wait<0>();
    if (exact_step || (draft && !p.v_alias)) {
      fence_proxy_async();
      __syncthreads();  // the rewritten P (and a reloaded draft V) visible to wgmma
    }
    tr.mark(5);

    // ---- O[:, 256 grp .. +256] += P V ----
    fence_regs<128>(o);
    wgmma_fence();
    if constexpr (f16)
      issue_pv<true>(o, sP, sK, grp);
    else
      issue_pv(o, sP, sK, grp);
    wgmma_commit();
    if (!FP8 || p.fp8_sched != 2) store_fp8();  // tile j+1 (fp8) into the stage freed at barrier 1, under PV
    wgmma_wait0();
    fence_regs<128>(o);
    if (FP8 && p.fp8_sched == 2) store_fp8();
    tr.mark(6);
  };
  if constexpr (F16) {
    int j = 0;
    for (; j < w.n_pre; ++j) tile_step(j, std::true_type{});
    for (; j < w.ntiles; ++j) tile_step(j, std::false_type{});
  } else {
    for (int j = 0; j < w.ntiles; ++j) tile_step(j, std::false_type{});
  }
  cp_async_wait<0>();

  // ---- finalize: row sums of both halves, normalized output or split partial ----
  publish_row_sums(l_run, red_sum, grp, r0, lane);
  __syncthreads();
  write_rows(p, w, s, o, m_run, red_sum, grp, r0, lane);
  if (GATED) fp8_gate_order_end(p);
  tr.mark(7);
  tr.flush(tid, grp, w.ntiles);
}

}  // namespace wg
}  // namespace mlav
