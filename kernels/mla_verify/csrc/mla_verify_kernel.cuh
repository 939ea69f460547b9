// Paged bf16 MLA target-verify attention (tree mask, split-K, mma.sync tensor cores).
//
// Layouts (SGLang MLA, page_size = 1):
//   q        [T, H, 576] bf16, last dim contiguous (strides q_st, q_sh in elements)
//   k_extend [T, 1, 576] bf16 (draft latent + rope), v_extend [T, 1, 512] bf16
//   o        [T, H, 512] bf16, written for every (token, head) of every request
//   k_buffer [slots, 1, 576] bf16, or fp8 e4m3fn (SGLang --kv-cache-dtype fp8_e4m3: logits of prefix
//            keys scaled by k_scale, prefix V by v_scale; the draft rows stay bf16 and unscaled);
//            V of the prefix = first 512 dims of the same row
//   qo_indptr / kv_indptr [B+1] (int32 or int64), kv_indices int64 slot ids (prefix only)
//   custom_mask uint8 FULL layout: request b row i col j at mask_indptr[b] + i*(L_b+n_b) + j;
//   only the draft columns j in [L_b, L_b+n_b) are read.
//
// Row packing: row r of request b = (draft token r / H, head r % H); CTA (m, s, b) owns rows
// [m*BM, m*BM+BM) of request b and prefix split s. Warp w: row group g = w % (BM/16),
// half c = w / (BM/16). S = Q K^T: warp (g, c) computes 16 rows x the c-th BN/2 tokens over
// all 576 dims; row max / sum are exchanged through smem; P (bf16, BM x BN) and the per-row
// rescale factor go to smem; then warp (pr = w % (BM/32), q = w / (BM/32)) updates
// O[32 rows, 128 cols of quarter q] = alpha O + P[32 x BN] V[BN x 128] (V = dims 0..511 of the
// same KV tile, read with ldmatrix.trans). O accumulator: 128 fp32 registers per thread.
// Softmax runs in the log2 domain (scale_log2 = sm_scale * log2(e)); lse partials are log2.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include <climits>
#include <type_traits>

#include "fp8_e4m3.cuh"
#include "mla_verify_params.h"

namespace mlav {

constexpr int D_QK = 576;             // latent 512 + rope 64
constexpr int D_V = 512;              // V = first 512 dims of the latent
constexpr int ROW_BYTES = D_QK * 2;   // 1152 B per token / query row in smem
constexpr int ROW_CHUNKS = D_QK / 8;  // 72 chunks of 16 B
constexpr int V_CHUNKS = D_V / 8;     // 64 chunks of 16 B



__device__ __forceinline__ int64_t ld_idx(const void* p, int is64, int i) {
  return is64 ? reinterpret_cast<const int64_t*>(p)[i] : (int64_t)reinterpret_cast<const int32_t*>(p)[i];
}

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16-byte async copy; src_bytes = 0 zero-fills the destination without reading src.
__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes));
}
// 16-byte shared store (fp8 loader: registers -> smem after the dequantization).
__device__ __forceinline__ void st_shared_v4(uint32_t addr, uint4 v) {
  asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w)
               : "memory");
}

// Two fp8 e4m3fn bytes of w (picked by the byte_perm selector: 0x1404 bytes 0-1, 0x3424 bytes 2-3)
// to a bf16x2 word, exactly (every e4m3 value is a bf16 value). Each byte goes to the top of a
// 16-bit lane (sign at bit 15); its 7 exponent+mantissa bits shifted right by 4 form the bf16 of
// x * 2^-120 (e4m3 subnormals become bf16 subnormals of the same scaled value); one bf16x2
// multiply by 2^120 (a power of two, result in bf16's normal range: exact) restores x. The two
// NaN codes (0x7f, 0xff) come out as +-480; SGLang's fp8 cache never stores them.
constexpr uint32_t FP8_BF16_RESCALE = 0x7B807B80u;  // bf16x2 (2^120, 2^120): the decode's restoring factor
__device__ __forceinline__ uint32_t fp8x2_to_bf16x2(uint32_t w, uint32_t sel, uint32_t kf = FP8_BF16_RESCALE) {
  const uint32_t u = __byte_perm(w, 0u, sel);
  const uint32_t b = (u & 0x80008000u) | ((u >> 4) & 0x07F007F0u);
  __nv_bfloat162 x, k;
  *reinterpret_cast<uint32_t*>(&x) = b;
  *reinterpret_cast<uint32_t*>(&k) = kf;  // FP8_BF16_RESCALE; 0 zeroes the pair
  x = __hmul2(x, k);
  return *reinterpret_cast<uint32_t*>(&x);
}

// Eight fp8 values (8 bytes, ascending addresses) to eight bf16 (one 16-byte smem chunk).
// kf = 0 instead of FP8_BF16_RESCALE writes zeros (+-0) for an unreadable row (the multiply zeroes).
__device__ __forceinline__ uint4 fp8x8_to_bf16x8(uint32_t lo, uint32_t hi, uint32_t kf = FP8_BF16_RESCALE) {
  return make_uint4(fp8x2_to_bf16x2(lo, 0x1404u, kf), fp8x2_to_bf16x2(lo, 0x3424u, kf),
                    fp8x2_to_bf16x2(hi, 0x1404u, kf), fp8x2_to_bf16x2(hi, 0x3424u, kf));
}

// Eight fp8 values (8 bytes, ascending addresses) to eight f16 (one 16-byte smem chunk).
__device__ __forceinline__ uint4 fp8x8_to_f16x8(uint32_t lo, uint32_t hi) {
  using fp8e4m3::e4m3x2_to_f16x2;
  return make_uint4(e4m3x2_to_f16x2(lo), e4m3x2_to_f16x2<true>(lo), e4m3x2_to_f16x2(hi), e4m3x2_to_f16x2<true>(hi));
}

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

__device__ __forceinline__ void ldsm_x4(uint32_t addr, uint32_t& r0, uint32_t& r1, uint32_t& r2, uint32_t& r3) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3) : "r"(addr));
}
__device__ __forceinline__ void ldsm_x2(uint32_t addr, uint32_t& r0, uint32_t& r1) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];\n" : "=r"(r0), "=r"(r1) : "r"(addr));
}
__device__ __forceinline__ void ldsm_x4_t(uint32_t addr, uint32_t& r0, uint32_t& r1, uint32_t& r2, uint32_t& r3) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3) : "r"(addr));
}
__device__ __forceinline__ void mma16816(float* c, uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                         uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// Floor of the partial-traffic cap of the split rule (api.PARTIAL_CAP_BYTES, 48 MiB).
constexpr long long SPLIT_PART_CAP_BYTES = 48ll << 20;

// floor(x / d) for integers 0 <= x < 2^22, 1 <= d <= 2^24, given r = __frcp_ru(d) (IEEE 1/d rounded
// up; d is exact in fp32): r = 1/d + e, 0 <= e < 2^-23 / d, so x*r < x/d + 1/d and floor(x*r) =
// floor(x/d). The fma forms 2^23 + x*r exactly and rounds toward zero; in [2^23, 2^24) fp32 steps by
// 1, so its bits are 0x4B000000 + floor(x*r). Two instructions once r is known.
__device__ __forceinline__ int floor_div_rcp(float x, float r) {
  return (int)(__float_as_uint(__fmaf_rz(x, r, 8388608.0f)) - 0x4B000000u);
}

// The batch's real prefix total: kv_indptr[B] - kv_indptr[0] clamped to [0, n_kv_indices] (what effective_splits'
// rule and fp8_gate_shut evaluate).
__device__ __forceinline__ int64_t prefix_total(const Params& p, int64_t kv_first, int64_t kv_last) {
  const int64_t diff = kv_last - kv_first;
  return diff < 0 ? 0 : (diff > p.n_kv_indices ? p.n_kv_indices : diff);
}

// Split count this launch runs. p.split_auto = 0: p.S (an explicit num_splits, or one split).
// p.split_auto = 1: the host's exact-length rule (api.splits_for_total: the same integer result)
// on the real prefix total of the batch, total = kv_indptr[B] - kv_indptr[0] clamped to
// [0, n_kv_indices], and capped at the grid's p.S:
//   length = ceil(total / B); s_max = clamp(min(rule_s_cap, max(total * 1152, 48 MiB) /
//   rule_part_div), 1, p.S); S = the s in [1, s_max] minimizing the critical CTA's KV tiles
//   max(s > 1 ? chunk / BN : 0, ceil(last / BN) + draft_tiles), chunk = ceil(ceil(length / s) / BN)
//   * BN, last = max(0, length - (s - 1) * chunk); the smallest s on ties.
// The eager host passes p.S = that rule on kv_indices.numel() (= total for exact-size buffers), so
// the device's S equals p.S there; under a CUDA graph captured on max-size buffers, p.S is the
// capture's maximum and the device follows the replayed length. Lane i of each warp evaluates
// s = i + 1, i + 33, ...; a warp min over (cost << 8 | s) picks the same s in every warp of every
// CTA and in the combine kernel. Must be called by full warps (before any early return).
// kv_first / kv_last: kv_indptr[0] and kv_indptr[B], loaded by the caller together with its
// other index loads (one DRAM round trip at the kernel start, not two).
__device__ __forceinline__ int effective_splits(const Params& p, int64_t kv_first, int64_t kv_last) {
  if (!p.split_auto || p.S <= 1) return p.S;
#ifdef MLAV_DIAG_NORULE
  // Timing diagnostic, never in a shipped build (#define MLAV_DIAG_NORULE 1 in a copy of csrc/ run by
  // bench --tree-ab): the graph mode without the rule's latency, the grid's count instead (the output
  // then differs from the exact call's wherever the rule would pick fewer splits).
  if (MLAV_DIAG_NORULE) return p.S;
#endif
  // Fast path, in KV tiles (BN tokens): Lt = ceil(length / BN) = ceil(total / (B BN)) and q(s) =
  // chunk / BN = ceil(total / (B BN s)) (nested ceilings), so ceil(last / BN) = max(0, Lt - (s-1) q)
  // and the cost is max(q, dt, Lt + dt - (s-1) q) (for s = 1, q = Lt <= Lt + dt: the host's 0 there
  // changes nothing). Each ceiling is floor_div_rcp(total - 1, d) + 1. Guards (else the general
  // path below, the same rule with divisions): p.S <= 128 (4 candidates per lane), B BN <= 2^17
  // (d <= 2^24), 0 <= dt < 2^23, 1 <= part_div < 2^32 and, once loaded, total <= UINT_MAX / 1152
  // (< 2^22). Then cost <= Lt + dt < 2^24 - 1 and the key cost * 256 + s fits 32 bits (one redux).
  const int lane = threadIdx.x & 31, bn = p.rule_bn, dt = p.rule_draft_tiles;
  const bool fast = p.S <= 128 && p.B >= 1 && bn > 0 && (bn & (bn - 1)) == 0 && (int64_t)p.B * bn <= (1 << 17) &&
             dt >= 0 && dt < (1 << 23) && p.rule_part_div >= 1 && p.rule_part_div <= (int64_t)UINT_MAX;
  const unsigned D = (unsigned)p.B * (unsigned)bn;  // <= 2^17 where used
  const int s_hi = p.rule_s_cap < p.S ? p.rule_s_cap : p.S;
  const float rcp_lt = __frcp_ru(__uint2float_rn(D));
  float rcp_s[4];
  unsigned lim_s[4];  // s is admitted iff max(total * 1152, 48 MiB) >= lim_s: s * part_div bytes, 0 for s = 1,
                      // UINT_MAX past min(rule_s_cap, p.S) (the cap is below UINT_MAX)
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    const int s = lane + 1 + 32 * k;
    rcp_s[k] = __frcp_ru(__uint2float_rn(D * (unsigned)s));
    const unsigned long long lim = (unsigned long long)s * (unsigned long long)p.rule_part_div;
    lim_s[k] = s == 1 ? 0u : (s > s_hi || lim > UINT_MAX ? UINT_MAX : (unsigned)lim);
  }
  // The compiler sinks these parameter / lane terms past the exact-buffer shortcut below, so an eager
  // call does not pay them. Pinned ahead of the kv_indptr loads' first use (an empty asm), they cost the
  // eager B=1 call 1.5% at L=4k for no gain in graph replays (H200, session 14 calls 5-6).
  const int64_t diff = kv_last - kv_first;
  const int64_t total = prefix_total(p, kv_first, kv_last);
  // Exact-size index buffer (every eager call): the host evaluated this rule on this very total,
  // so its count is the answer; the rule below runs only when the buffer is larger (CUDA graphs).
  // Same count, so bitwise the same output; it saves the rule's latency at the kernel start, which
  // cost the eager B=1 path 3-10% when it ran every time (v5 notes; this shortcut not yet timed).
  if (total == p.n_kv_indices) return p.S;
  // Past the shortcut, 1 <= diff <= UINT_MAX / 1152 means total == diff (diff < n_kv_indices).
  if (fast && diff >= 1 && diff <= (int64_t)(UINT_MAX / 1152)) {
    const unsigned t = (unsigned)diff;
    const float x = (float)(t - 1);  // exact: < 2^22
    const unsigned cap = t * 1152u > (unsigned)SPLIT_PART_CAP_BYTES ? t * 1152u : (unsigned)SPLIT_PART_CAP_BYTES;
    const int lt_dt = floor_div_rcp(x, rcp_lt) + 1 + dt;  // Lt + dt
    unsigned best = UINT_MAX;
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const int s = lane + 1 + 32 * k, q = floor_div_rcp(x, rcp_s[k]) + 1;
      const int floor_c = cap >= lim_s[k] ? dt : (1 << 24) - 1;  // not admitted: above every admitted cost
      int cost = lt_dt + (1 - s) * q;
      cost = cost > q ? cost : q;
      cost = cost > floor_c ? cost : floor_c;
      const unsigned key = (unsigned)cost * 256u + (unsigned)s;
      best = key < best ? key : best;
    }
    return (int)(__reduce_min_sync(0xffffffffu, best) & 255u);  // s = 1 (lane 0) is always admitted
  }
  if (total < 1) return 1;
  // General path (huge totals or parameters): 32/64-bit divisions per s, 64-bit key, shuffle min.
  unsigned length;  // 32-bit per-s arithmetic (a request's prefix length is an int in work_of too)
  int64_t s_max64;
  if (total <= (int64_t)(UINT_MAX / 1152) && p.rule_part_div <= (int64_t)UINT_MAX) {
    const unsigned t = (unsigned)total, cap = t * 1152u > (unsigned)SPLIT_PART_CAP_BYTES ? t * 1152u
                                                                                        : (unsigned)SPLIT_PART_CAP_BYTES;
    length = (t + (unsigned)p.B - 1) / (unsigned)p.B;
    s_max64 = cap / (unsigned)p.rule_part_div;
  } else {
    const int64_t length64 = (total + p.B - 1) / p.B;
    length = length64 > INT_MAX ? (unsigned)INT_MAX : (unsigned)length64;
    s_max64 = (total * 1152 > SPLIT_PART_CAP_BYTES ? total * 1152 : SPLIT_PART_CAP_BYTES) / p.rule_part_div;
  }
  s_max64 = s_max64 > p.rule_s_cap ? p.rule_s_cap : s_max64;
  const int s_max = s_max64 > p.S ? p.S : (s_max64 < 1 ? 1 : (int)s_max64);
  const unsigned sh = (unsigned)(__ffs(p.rule_bn) - 1), bn_1 = (unsigned)p.rule_bn - 1;  // bn: a power of two
  unsigned long long best = ULLONG_MAX;
  for (int s = lane + 1; s <= s_max; s += 32) {
    const unsigned chunk = (((length + s - 1) / (unsigned)s + bn_1) >> sh) << sh;
    const unsigned long long before = (unsigned long long)(s - 1) * chunk;
    const unsigned last = before >= length ? 0u : length - (unsigned)before;
    const unsigned a = s > 1 ? chunk >> sh : 0u, c = ((last + bn_1) >> sh) + (unsigned)p.rule_draft_tiles;
    const unsigned long long key = ((unsigned long long)(a > c ? a : c) << 8) | (unsigned)s;
    best = key < best ? key : best;
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const unsigned long long other = __shfl_xor_sync(0xffffffffu, best, o);
    best = other < best ? other : best;
  }
  return (int)(best & 255);
}

// Programmatic dependent launch of the combine (issue 13, B=1 intercept): with p.pdl_early the
// split CTAs signal at their start, so the combine grid is launched once every split CTA has
// started (S > 1 grids are one wave: the split rule caps S at SM slots / CTAs per split); its
// blocks take the SMs that split CTAs leave, run their prologue (effective_splits, row checks) and
// block in griddepcontrol.wait until the whole split grid has completed and its writes are
// visible. Without the signal, the combine is launched only as the split grid ends.
__device__ __forceinline__ void pdl_signal(const Params& p) {
  if (p.pdl_early) asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
}

// Work of CTA (m, s, b): rows [row0, row0+BM) of request b, prefix split s (device-side only).
struct Work {
  int64_t qo0, kv0, grow0;  // first draft token, first kv_indices position, packed row of row0
  int n_b, L, R, row0;      // draft tokens, prefix length, packed rows n_b*H, first tile row
  int pb, pe, n_pre, ntiles;  // prefix range [pb, pe) of this split, its KV tiles, + draft tiles
  int S;                    // splits run (effective_splits); CTAs with s >= S exit at once
};

// Prefix tokens of one split of a `length`-token prefix on S splits: ceil(length / S) rounded up to whole BN tiles
// (api.split_chunk).
template <typename I>
__device__ __forceinline__ I split_chunk(I length, int S, int BN) {
  I chunk = (length + S - 1) / S;
  return (chunk + BN - 1) / BN * BN;
}

// fp8 CUDA-graph launches (p.fp8_f16 3 and 4: api.fp8_f16, mla_verify.cu launch_wgmma) run the bf16 decode or the
// F16 kernel (p.fp8_gate = 1) and then the warp-specialized fp8 kernel (2) on the same grid, and a CTA works only
// in the kernel an eager call of the replayed length would launch: the latter where a split's prefix chunk,
// ceil(ceil(total / B) / S) rounded up to whole BN tiles (api.split_chunk of api.request_length), holds at least
// p.fp8_ws_min tokens. Every CTA of both grids derives the same chunk (S = effective_splits, total as there), so
// exactly one grid writes the partials. True: this CTA's kernel is not that one (it exits and writes nothing).
__device__ __forceinline__ bool fp8_gate_shut(const Params& p, int64_t kv_first, int64_t kv_last, int S, int BN) {
  const int64_t total = prefix_total(p, kv_first, kv_last);
  int64_t length = (total + p.B - 1) / p.B;
  length = length > INT_MAX ? INT_MAX : length;
  return (split_chunk(length, S, BN) >= p.fp8_ws_min) != (p.fp8_gate == 2);
}

// The gated pair's second kernel is the first's programmatic dependent (mla_verify.cu), and the combine waits for
// the second grid only; the grid that is shut there writes nothing, the other one the partials. So CTA 0 of a gated
// grid waits for its predecessor (the other kernel: a no-op in the first, a plain launch), and the second grid
// completes after the first.
// shut: at the CTA's start, where it exits at once; MLAV_GATE_WAIT_END (experimental) makes a working CTA 0 wait at
// its end instead (fp8_gate_order_end: the other grid long done by then) rather than before its work.
#ifndef MLAV_GATE_WAIT_END
#define MLAV_GATE_WAIT_END 0
#endif
__device__ __forceinline__ void fp8_gate_order(const Params& p, bool shut) {
  if (p.fp8_gate != 0 && (shut || !MLAV_GATE_WAIT_END) && (blockIdx.x | blockIdx.y | blockIdx.z) == 0)
    asm volatile("griddepcontrol.wait;\n" ::: "memory");
}
__device__ __forceinline__ void fp8_gate_order_end(const Params& p) {
  if (MLAV_GATE_WAIT_END && p.fp8_gate != 0 && (blockIdx.x | blockIdx.y | blockIdx.z) == 0)
    asm volatile("griddepcontrol.wait;\n" ::: "memory");
}

// Called by every thread of the CTA at the kernel's start (effective_splits needs full warps). fp8_gated: a kernel
// that p.fp8_gate may shut (fp8_gate_shut: the CTA then exits as one past the split count does).
__device__ __forceinline__ Work work_of(const Params& p, int m, int s, int b, int BM, int BN,
                                        bool fp8_gated = false) {
  Work w;
  int64_t qo0 = ld_idx(p.qo_indptr, p.qo_is64, b), qo1 = ld_idx(p.qo_indptr, p.qo_is64, b + 1);
  int64_t kv0 = ld_idx(p.kv_indptr, p.kv_is64, b), kv1 = ld_idx(p.kv_indptr, p.kv_is64, b + 1);
  const int64_t kv_first = ld_idx(p.kv_indptr, p.kv_is64, 0), kv_last = ld_idx(p.kv_indptr, p.kv_is64, p.B);
  w.S = effective_splits(p, kv_first, kv_last);
  const bool shut = fp8_gated && p.fp8_gate != 0 && fp8_gate_shut(p, kv_first, kv_last, w.S, BN);
  qo0 = qo0 < 0 ? 0 : (qo0 > p.T ? p.T : qo0);
  qo1 = qo1 < qo0 ? qo0 : (qo1 > p.T ? p.T : qo1);
  w.qo0 = qo0;
  w.n_b = (int)(qo1 - qo0);
  w.kv0 = kv0;
  w.L = (int)(kv1 > kv0 ? kv1 - kv0 : 0);
  w.R = w.n_b * p.H;
  w.row0 = m * BM;
  if (s >= w.S || shut) w.row0 = w.R;  // split past the effective count, or gated: the CTA exits (row0 >= R)
  const int chunk = split_chunk(w.L, w.S, BN);
  w.pb = s * chunk; if (w.pb > w.L) w.pb = w.L;
  w.pe = w.pb + chunk; if (w.pe > w.L) w.pe = w.L;
  w.n_pre = (w.pe - w.pb + BN - 1) / BN;
  w.ntiles = w.n_pre + ((s == w.S - 1) ? (w.n_b + BN - 1) / BN : 0);
  w.grow0 = qo0 * p.H + w.row0;
  return w;
}

// Source of query row r of the tile (ok = false: padded row, zero-filled).
__device__ __forceinline__ const __nv_bfloat16* q_src(const Params& p, const Work& w, int r, bool& ok) {
  const int gr = w.row0 + r;
  ok = gr < w.R;
  return ok ? p.q + (w.qo0 + gr / p.H) * p.q_st + (int64_t)(gr % p.H) * p.q_sh : p.q;
}

// Slot id of token tk of KV tile j (-1: draft tile or past the range). One global load; callers
// fetch it one tile ahead, so its latency hides behind the current tile instead of stalling the
// cp.async issue of the next one.
__device__ __forceinline__ int64_t tile_slot(const Params& p, const Work& w, int j, int BN, int tk) {
  if (j >= w.n_pre) return -1;
  const int t0 = w.pb + j * BN;
  const int64_t pos = w.kv0 + t0 + tk;
  return (t0 + tk < w.pe && pos >= 0 && pos < p.n_kv_indices) ? __ldg(p.kv_indices + pos) : -1;
}

// Source of token tk of KV tile j: prefix slot `slot` of k_buffer (j < n_pre) or a k_extend row.
// ok = false for positions past the range or bad slot ids (zero-filled, never read).
__device__ __forceinline__ const __nv_bfloat16* kv_src(const Params& p, const Work& w, int j, int BN, int tk,
                                                       int64_t slot, bool& ok) {
  if (j < w.n_pre) {
    ok = slot >= 0 && slot < p.num_slots;
    return ok ? p.kbuf + slot * p.kb_st : p.kbuf;
  }
  const int d = (j - w.n_pre) * BN + tk;
  ok = d < w.n_b;
  return ok ? p.kext + (w.qo0 + d) * p.ke_st : p.kext;
}

// Source of draft token tk's V row (v_extend) in draft tile j.
__device__ __forceinline__ const __nv_bfloat16* v_src(const Params& p, const Work& w, int j, int BN, int tk,
                                                      bool& ok) {
  const int d = (j - w.n_pre) * BN + tk;
  ok = d < w.n_b;
  return ok ? p.vext + (w.qo0 + d) * p.ve_st : p.vext;
}

// Whether draft token i may see draft column t (t < n_b): FULL custom mask, causal, or all.
__device__ __forceinline__ bool draft_visible(const Params& p, int64_t mask_base, const Work& w, int i, int t) {
  if (p.mask_mode == 0) {
    const int64_t mi = mask_base + (int64_t)i * (w.L + w.n_b) + w.L + t;
    return mi >= 0 && mi < p.mask_numel && p.mask[mi] != 0;
  }
  return p.mask_mode == 1 ? t <= i : true;
}

// Destination of tile row r's 512 output values: the bf16 output row when there is one split,
// else split s's fp32 partial row. Built once per row; put() writes columns (col, col+1) already
// divided by the row sum.
struct RowOut {
  __nv_bfloat16* o;
  float* part;
  __device__ __forceinline__ void put(int col, float x0, float x1) const {
    if (o) *reinterpret_cast<__nv_bfloat162*>(o + col) = __floats2bfloat162_rn(x0, x1);
    else *reinterpret_cast<float2*>(part + col) = make_float2(x0, x1);
  }
};

// The output row in o of request w's packed row gr (token gr / H, head gr % H).
__device__ __forceinline__ __nv_bfloat16* out_row(const Params& p, const Work& w, int gr) {
  return p.o + (w.qo0 + gr / p.H) * p.o_st + (int64_t)(gr % p.H) * p.o_sh;
}

__device__ __forceinline__ RowOut row_out(const Params& p, const Work& w, int s, int r) {
  const int gr = w.row0 + r;
  RowOut ro;
  ro.o = w.S == 1 ? out_row(p, w, gr) : nullptr;
  ro.part = w.S == 1 ? nullptr : p.ws_o + (((int64_t)s * p.T + w.qo0) * p.H + w.row0 + r) * D_V;
  return ro;
}

// Byte offset of 16-byte chunk `ch` of row `row` in a 1152-byte-stride tile (XOR swizzle inside
// each aligned group of 8 chunks, so 8 consecutive rows at one chunk hit 8 distinct bank groups).
__device__ __forceinline__ uint32_t swz(int row, int ch) {
  return (uint32_t)(row * ROW_BYTES + ((ch ^ (row & 7)) << 4));
}

// Shared-memory layout of one CTA, in bytes.
template <int BM, int BN, int STAGES>
struct Smem {
  static constexpr int Q = BM * ROW_BYTES;
  static constexpr int KV = BN * ROW_BYTES;
  static constexpr int P_ROW = BN * 2;
  static constexpr int P = BM * P_ROW;
  static constexpr int RED = 6 * BM * 4;  // fp32 [max][half][BM], [sum][half][BM], alpha[BM], m[BM]
  static constexpr int off_kv = Q;
  static constexpr int off_p = Q + STAGES * KV;
  static constexpr int off_red = off_p + P;
  static constexpr int bytes = off_red + RED;
};

template <int BM, int BN, int STAGES>
struct Cfg {
  static constexpr int ROW_GROUPS = BM / 16;
  static constexpr int WARPS = ROW_GROUPS * 2;
  static constexpr int THREADS = WARPS * 32;
  static constexpr int WN = BN / 2;     // tokens per warp in S
  static constexpr int NB_S = WN / 8;   // n8 blocks per warp in S
  static constexpr int P_CHUNKS = BN / 8;
  // PV phase: warp (pr, q) owns rows [32*pr, 32*pr+32) x output columns [128*q, 128*q+128)
  static constexpr int PV_ROW_PAIRS = BM / 32;
  static_assert(BM % 32 == 0 && WARPS / PV_ROW_PAIRS == 4, "PV warp tiling: 4 column quarters");
  static_assert(BM % 16 == 0 && BN % 16 == 0 && STAGES >= 2, "tile config");
  static_assert((BN * ROW_CHUNKS) % THREADS == 0 && (BM * ROW_CHUNKS) % THREADS == 0, "loader split");
};

__device__ __forceinline__ uint32_t p_off(int row, int col, int p_row_bytes, int p_chunks) {
  int ch = col >> 3;
  int sw = ch ^ (row & (p_chunks - 1) & 7);
  return (uint32_t)(row * p_row_bytes + (sw << 4) + ((col & 7) << 1));
}

template <int BM, int BN, int STAGES, bool FP8>
__global__ void __launch_bounds__(Cfg<BM, BN, STAGES>::THREADS, 1) mla_verify_split_kernel(const Params p) {
  using C = Cfg<BM, BN, STAGES>;
  using SM = Smem<BM, BN, STAGES>;
  extern __shared__ __align__(128) uint8_t smem[];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int g = warp % C::ROW_GROUPS, c = warp / C::ROW_GROUPS;
  const int m = blockIdx.x, s = blockIdx.y, b = blockIdx.z;
  pdl_signal(p);

  const Work w = work_of(p, m, s, b, BM, BN);
  if (w.row0 >= w.R) return;
  const int n_b = w.n_b, R = w.R, row0 = w.row0, pb = w.pb, pe = w.pe, n_pre = w.n_pre;
  const int ntiles = w.ntiles;
  const int64_t grow0 = w.grow0;

  float* red_max = reinterpret_cast<float*>(smem + SM::off_red);  // [2][BM]
  float* red_sum = red_max + 2 * BM;                              // [2][BM]
  float* alpha_s = red_sum + 2 * BM;                              // [BM] rescale of this tile
  float* m_s = alpha_s + BM;                                      // [BM] final running max
  const int pr = warp % C::PV_ROW_PAIRS, pq = warp / C::PV_ROW_PAIRS;  // PV-phase warp tile

  if (ntiles == 0) {  // empty split: sentinel only
    for (int r = tid; r < BM; r += C::THREADS)
      if (row0 + r < R) p.ws_lse[(int64_t)s * p.T * p.H + grow0 + r] = -INFINITY;
    return;
  }

  const uint32_t sQ = smem_u32(smem), sKV = smem_u32(smem + SM::off_kv), sP = smem_u32(smem + SM::off_p);
  uint8_t* pP = smem + SM::off_p;

  // ---- loaders: each thread copies a fixed token row (one slot lookup per tile) ----
  constexpr int TPT = C::THREADS / BN;          // threads per KV token row
  constexpr int QTPR = C::THREADS / BM;         // threads per Q row
  static_assert(ROW_CHUNKS % TPT == 0 && ROW_CHUNKS % QTPR == 0 && V_CHUNKS % TPT == 0, "loader split");
  auto load_q = [&]() {
    const int r = tid / QTPR, sub = tid % QTPR;
    bool ok;
    const __nv_bfloat16* src = q_src(p, w, r, ok);
#pragma unroll 6
    for (int it = 0; it < ROW_CHUNKS / QTPR; ++it) {
      const int ch = sub + it * QTPR;
      cp_async16(sQ + swz(r, ch), ok ? src + ch * 8 : src, ok ? 16 : 0);
    }
  };
  int64_t next_slot = tile_slot(p, w, 0, BN, tid / TPT);  // slot of the next tile to load
  // fp8 prefix tiles: the thread's 8-byte pieces of its token row (one per 16-byte bf16 chunk)
  // go global -> registers when the tile is issued and registers -> bf16 smem (store_fp8) at the
  // end of the same iteration, so the load latency hides behind that iteration's S and PV.
  constexpr int F8N = FP8 ? ROW_CHUNKS / TPT : 1;
  uint2 f8[F8N];
  int f8_stage = -1;
  auto load_tile = [&](int j, int stage) {  // tiles are loaded in order 0, 1, 2, ...
    const uint32_t dst0 = sKV + stage * SM::KV;
    const int tk = tid / TPT, sub = tid % TPT;
    if constexpr (FP8) {
      if (j < n_pre) {
        const int64_t slot = next_slot;
        next_slot = tile_slot(p, w, j + 1, BN, tk);
        const bool ok = slot >= 0 && slot < p.num_slots;
        const uint2* src = reinterpret_cast<const uint2*>(p.kbuf8 + (ok ? slot : 0) * p.kb_st) + sub;
        // slot 0 exists: the load is always in bounds. An unreadable row is zeroed right here: zeroing it at
        // the store instead (as the wgmma kernel does) was 1.045-1.065x slower in this kernel (session 16 call 1)
#pragma unroll
        for (int it = 0; it < F8N; ++it) {
          const uint2 v = __ldg(src + it * TPT);
          f8[it] = ok ? v : make_uint2(0u, 0u);
        }
        f8_stage = stage;
        return;
      }
    }
    bool ok;
    const __nv_bfloat16* src = kv_src(p, w, j, BN, tk, next_slot, ok);
    next_slot = tile_slot(p, w, j + 1, BN, tk);
#pragma unroll 6
    for (int it = 0; it < ROW_CHUNKS / TPT; ++it) {
      const int ch = sub + it * TPT;
      cp_async16(dst0 + swz(tk, ch), ok ? src + ch * 8 : src, ok ? 16 : 0);
    }
  };
  auto store_fp8 = [&]() {
    if constexpr (FP8) {
      if (f8_stage >= 0) {
        const uint32_t dst0 = sKV + f8_stage * SM::KV;
        const int tk = tid / TPT, sub = tid % TPT;
#pragma unroll
        for (int it = 0; it < F8N; ++it)
          st_shared_v4(dst0 + swz(tk, sub + it * TPT), fp8x8_to_bf16x8(f8[it].x, f8[it].y));
        f8_stage = -1;
      }
    }
  };
  auto load_v_draft = [&](int j, int stage) {  // overwrite dims 0..511 with v_extend rows
    const uint32_t dst0 = sKV + stage * SM::KV;
    const int tk = tid / TPT, sub = tid % TPT;
    bool ok;
    const __nv_bfloat16* src = v_src(p, w, j, BN, tk, ok);
    for (int it = 0; it < V_CHUNKS / TPT; ++it) {
      const int ch = sub + it * TPT;
      cp_async16(dst0 + swz(tk, ch), ok ? src + ch * 8 : src, ok ? 16 : 0);
    }
  };

  // ---- prologue: Q + first STAGES-1 tiles ----
  load_q();
  load_tile(0, 0);
  store_fp8();
  cp_async_commit();
#pragma unroll
  for (int st = 1; st < STAGES - 1; ++st) {
    if (st < ntiles) load_tile(st, st);
    store_fp8();
    cp_async_commit();
  }
  const float sl_pre = FP8 ? p.scale_log2 * p.k_scale : p.scale_log2;  // log2-domain scale of prefix logits
  const float vs_pre = FP8 ? p.v_scale : 1.f;                         // V dequantization folded into P

  float o_acc[2][16][4];  // [16-row block][n8 block of 128 columns][mma C fragment]
#pragma unroll
  for (int rb = 0; rb < 2; ++rb)
#pragma unroll
    for (int i = 0; i < 16; ++i) o_acc[rb][i][0] = o_acc[rb][i][1] = o_acc[rb][i][2] = o_acc[rb][i][3] = 0.f;
  float m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.f, 0.f};

  const int rl0 = g * 16 + (lane >> 2);  // tile rows owned by this thread (and rl0 + 8)
  // token index (within the request) of the two owned rows; -1 for padded rows
  int tok_row[2];
#pragma unroll
  for (int h2 = 0; h2 < 2; ++h2) {
    int gr = row0 + rl0 + h2 * 8;
    tok_row[h2] = gr < R ? gr / p.H : -1;
  }
  int64_t mask_base = 0;
  if (p.mask_mode == 0) mask_base = ld_idx(p.mask_indptr, p.mi_is64, b);

  for (int j = 0; j < ntiles; ++j) {
    cp_async_wait<STAGES - 2>();
    __syncthreads();  // tile j (and Q) visible; every warp done with tile j-1
    {
      int jn = j + STAGES - 1;
      if (jn < ntiles) load_tile(jn, jn % STAGES);
      cp_async_commit();
    }
    const int stage = j % STAGES;
    const uint32_t sK = sKV + stage * SM::KV;
    const bool draft = j >= n_pre;

    // ---- S = Q K^T for 16 rows x WN tokens ----
    float sacc[C::NB_S][4];
#pragma unroll
    for (int i = 0; i < C::NB_S; ++i) sacc[i][0] = sacc[i][1] = sacc[i][2] = sacc[i][3] = 0.f;
    {
      const int qr = g * 16 + (lane & 15);
      const int qhi = lane >> 4;
      const int tk_base = c * C::WN;
#pragma unroll 4
      for (int kk = 0; kk < D_QK / 16; ++kk) {
        uint32_t a0, a1, a2, a3;
        ldsm_x4(sQ + swz(qr, 2 * kk + qhi), a0, a1, a2, a3);
        if constexpr (C::NB_S % 2 == 0) {
#pragma unroll
          for (int nb = 0; nb < C::NB_S; nb += 2) {
            const int mi = lane >> 3;
            const int tk = tk_base + nb * 8 + (mi >> 1) * 8 + (lane & 7);
            uint32_t b0, b1, b2, b3;
            ldsm_x4(sK + swz(tk, 2 * kk + (mi & 1)), b0, b1, b2, b3);
            mma16816(sacc[nb], a0, a1, a2, a3, b0, b1);
            mma16816(sacc[nb + 1], a0, a1, a2, a3, b2, b3);
          }
        } else {
#pragma unroll
          for (int nb = 0; nb < C::NB_S; ++nb) {
            const int mi = (lane >> 3) & 1;
            const int tk = tk_base + nb * 8 + (lane & 7);
            uint32_t b0, b1;
            ldsm_x2(sK + swz(tk, 2 * kk + mi), b0, b1);
            mma16816(sacc[nb], a0, a1, a2, a3, b0, b1);
          }
        }
      }
    }

    // ---- scale + mask, row max over this warp's columns ----
    float tmax[2] = {-INFINITY, -INFINITY};
    {
      int t_start, t_end;
      if (!draft) { t_start = pb + j * BN; t_end = pe; } else { t_start = (j - n_pre) * BN; t_end = n_b; }
#pragma unroll
      for (int nb = 0; nb < C::NB_S; ++nb) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int h2 = e >> 1;
          const int col = c * C::WN + nb * 8 + 2 * (lane & 3) + (e & 1);
          const int t = t_start + col;
          bool vis = t < t_end;
          if (draft && vis && tok_row[h2] >= 0) vis = draft_visible(p, mask_base, w, tok_row[h2], t);
          float v = vis ? sacc[nb][e] * (draft ? p.scale_log2 : sl_pre) : -INFINITY;
          sacc[nb][e] = v;
          tmax[h2] = fmaxf(tmax[h2], v);
        }
      }
#pragma unroll
      for (int h2 = 0; h2 < 2; ++h2) {
        tmax[h2] = fmaxf(tmax[h2], __shfl_xor_sync(0xffffffffu, tmax[h2], 1));
        tmax[h2] = fmaxf(tmax[h2], __shfl_xor_sync(0xffffffffu, tmax[h2], 2));
      }
      if ((lane & 3) == 0) {
        red_max[c * BM + rl0] = tmax[0];
        red_max[c * BM + rl0 + 8] = tmax[1];
      }
    }
    __syncthreads();  // partner maxima visible; every warp done reading K of this tile
    if (draft && !p.v_alias) {
      load_v_draft(j, stage);
      cp_async_commit();
    }
    // ---- online softmax update, P to smem ----
    float alpha[2];
#pragma unroll
    for (int h2 = 0; h2 < 2; ++h2) {
      const int r = rl0 + h2 * 8;
      float mx = fmaxf(red_max[r], red_max[BM + r]);
      float m_new = fmaxf(m_run[h2], mx);
      float m_use = (m_new == -INFINITY) ? 0.f : m_new;
      alpha[h2] = exp2f(m_run[h2] - m_use);  // m_run = -inf -> 0; never -inf - -inf
      m_run[h2] = m_new;
      l_run[h2] *= alpha[h2];
      float psum = 0.f;
      const float vs = draft ? 1.f : vs_pre;
#pragma unroll
      for (int nb = 0; nb < C::NB_S; ++nb) {
        float p0 = exp2f(sacc[nb][2 * h2] - m_use);
        float p1 = exp2f(sacc[nb][2 * h2 + 1] - m_use);
        psum += p0 + p1;
        const int col = c * C::WN + nb * 8 + 2 * (lane & 3);
        __nv_bfloat162 pv = __floats2bfloat162_rn(p0 * vs, p1 * vs);
        *reinterpret_cast<__nv_bfloat162*>(pP + p_off(r, col, SM::P_ROW, C::P_CHUNKS)) = pv;
      }
      l_run[h2] += psum;
      if (c == 0 && (lane & 3) == 0) alpha_s[r] = alpha[h2];
    }
    if (draft && !p.v_alias) cp_async_wait<0>();
    __syncthreads();  // P, alpha (and a reloaded draft V) visible

    // ---- O = alpha O + P V: 32 rows x 128 output columns per warp, BN tokens ----
#pragma unroll
    for (int rb = 0; rb < 2; ++rb) {
      const float al0 = alpha_s[pr * 32 + rb * 16 + (lane >> 2)];
      const float al1 = alpha_s[pr * 32 + rb * 16 + (lane >> 2) + 8];
#pragma unroll
      for (int i = 0; i < 16; ++i) {
        o_acc[rb][i][0] *= al0; o_acc[rb][i][1] *= al0;
        o_acc[rb][i][2] *= al1; o_acc[rb][i][3] *= al1;
      }
    }
#pragma unroll
    for (int ks = 0; ks < BN / 16; ++ks) {
      uint32_t a[2][4];
#pragma unroll
      for (int rb = 0; rb < 2; ++rb) {
        const int r = pr * 32 + rb * 16 + (lane & 15);
        const int col = ks * 16 + (lane >> 4) * 8;
        ldsm_x4(sP + p_off(r, col, SM::P_ROW, C::P_CHUNKS), a[rb][0], a[rb][1], a[rb][2], a[rb][3]);
      }
      const int mi = lane >> 3;
      const int tk = ks * 16 + (mi & 1) * 8 + (lane & 7);
#pragma unroll
      for (int np = 0; np < 8; ++np) {
        uint32_t b0, b1, b2, b3;
        ldsm_x4_t(sK + swz(tk, pq * 16 + np * 2 + (mi >> 1)), b0, b1, b2, b3);
#pragma unroll
        for (int rb = 0; rb < 2; ++rb) {
          mma16816(o_acc[rb][2 * np], a[rb][0], a[rb][1], a[rb][2], a[rb][3], b0, b1);
          mma16816(o_acc[rb][2 * np + 1], a[rb][0], a[rb][1], a[rb][2], a[rb][3], b2, b3);
        }
      }
    }
    store_fp8();  // tile j + STAGES - 1 (fp8): its stage was freed by this iteration's first barrier
  }
  cp_async_wait<0>();

  // ---- finalize: full row sum across both halves ----
#pragma unroll
  for (int h2 = 0; h2 < 2; ++h2) {
    l_run[h2] += __shfl_xor_sync(0xffffffffu, l_run[h2], 1);
    l_run[h2] += __shfl_xor_sync(0xffffffffu, l_run[h2], 2);
  }
  if ((lane & 3) == 0) {
    red_sum[c * BM + rl0] = l_run[0];
    red_sum[c * BM + rl0 + 8] = l_run[1];
    if (c == 0) {
      m_s[rl0] = m_run[0];
      m_s[rl0 + 8] = m_run[1];
    }
  }
  __syncthreads();
#pragma unroll
  for (int rb = 0; rb < 2; ++rb) {
#pragma unroll
    for (int h2 = 0; h2 < 2; ++h2) {
      const int r = pr * 32 + rb * 16 + (lane >> 2) + h2 * 8;
      const int gr = row0 + r;
      if (gr >= R) continue;  // padded row: write nothing
      const float l = red_sum[r] + red_sum[BM + r];
      const float inv = l > 0.f ? 1.f / l : 0.f;
      const RowOut ro = row_out(p, w, s, r);
#pragma unroll
      for (int nb = 0; nb < 16; ++nb)
        ro.put(pq * 128 + nb * 8 + 2 * (lane & 3), o_acc[rb][nb][2 * h2] * inv, o_acc[rb][nb][2 * h2 + 1] * inv);
      if (w.S > 1 && pq == 0 && (lane & 3) == 0)
        p.ws_lse[((int64_t)s * p.T + w.qo0) * p.H + row0 + r] = l > 0.f ? m_s[r] + log2f(l) : -INFINITY;
    }
  }
}

// Merge the S split partials of every packed row (S = effective_splits: the count the split
// kernel ran, <= the grid's p.S). A unit = (row, 128-column quarter) gets W warps (1, 2, 4 or 8;
// combine_warps_per_unit(S)) and a 256-thread block holds 8 / W units, so small split counts do
// not launch idle warps. The launch is sized for LW = combine_warps_per_unit(p.S) >= W (units *
// LW / 8 blocks); blocks past the units * W / 8 that S needs exit at once, so a CUDA graph replayed
// at a shorter length runs exactly the blocks, warps and arithmetic of a launch for S itself
// (bitwise; explicit __fmul_rn / __fadd_rn leave no contraction choice to the compiler). Warp k of
// a unit sums splits k, k + W, ... (lane = 4 columns, float4 loads, all of a warp's loads
// independent); the unit's warps are then added in a fixed order (bitwise deterministic). Split
// weights 2^(lse_s - max) use the unit's max; empty splits (lse = -inf) get weight 0 and their
// never-written partials are masked by a select, never multiplied. Rows of tokens past
// qo_indptr[B] are left untouched; S = 1 writes nothing (the split kernel wrote o). Launched with
// programmatic dependent launch when available: S is derived before griddepcontrol.wait, which
// blocks until the split kernel's writes are visible; block 0 always waits, so the combine grid
// never completes before the split grid.
// Grid-stride variant (mla_verify_combine_gs_kernel, MLAV_COMBINE_GRID_STRIDE=1, the default; issue
// 13): when the launch for LW would need more blocks than one resident wave of this kernel
// (occupancy x SMs), launch_combine runs the grid-stride kernel instead, its grid capped at one
// resident wave of its own; each block loops over the units-blocks a launch for S would have
// (vblock = blockIdx.x, blockIdx.x + gridDim.x, ...), so a graph captured for a larger split count
// no longer queues waves of blocks that only exit. Each unit's arithmetic depends on S, W and
// vblock only: bitwise the same output. It is a separate kernel because the loop costs registers
// (launches that fit one wave keep this one, its machine code unchanged): with 64-bit row indices
// and no bound its combine<8> took 80 (3 blocks per SM: 396 < the 512 units-blocks of a B=4 n=4
// graph replayed at S=9); the grid-stride kernel does its row arithmetic in 32 bits (combine_unit
// GS = true: the launcher uses it only for units < 2^31, the same integers) under
// __launch_bounds__(256, 4): <= 64 registers, 0 spills, 4 blocks per SM (528 on 132 SMs).
constexpr int COMBINE_MAX_SPLITS = 128;
// 1 (default since session 26): the warp-specialized kernel's token-split consumers (MODE 0, mla_verify_wgmma_ws.cuh)
// may stage their rows through shared memory and store them in 16-byte chunks, split partials as bf16 (p.part_bf16,
// the combine reads them so; which launches do: MLAV_STAGE_MIN_CTAS in mla_verify.cu); 0 (an A/B tree's baseline):
// never, fp32 partials and bf16 output pairs straight from the fragments (write_rows), as every other kernel writes.
#ifndef MLAV_PART_BF16
#define MLAV_PART_BF16 1
#endif
#ifndef MLAV_COMBINE_GRID_STRIDE
#define MLAV_COMBINE_GRID_STRIDE 1
#endif
constexpr int COMBINE_WARPS = 8;  // warps per block
__host__ __device__ constexpr int combine_warps_per_unit(int S) { return S > 16 ? 8 : S > 8 ? 4 : S > 4 ? 2 : 1; }

// GS (the grid-stride kernel): row indices in 32 bits (units < 2^31, checked by the launcher) and
// t_end = qo_indptr[B] passed in (loaded once per block); otherwise 64-bit, loaded here.
// Loads: the unit's lse values (unit thread i owns split i; S <= 32 * W) and this warp's first
// combine_prefetch<W, BF16, GS>() partials s = k, k + W, ... are issued together, before the max
// reduction needs the lse values, so S <= W * that count (B=1 n=8 H=16: S = 65, W = 8) merges after
// one L2 round trip; later partials are loaded in the accumulation loop. The lse values reach the
// accumulation through shared memory (lse_s), not a second global load per split. Same splits, same
// order, same arithmetic as before: bitwise the same sums (session 29; 25e9c12 had the same change for
// fp32 partials, lost with that tree's revert: combine 5.2 -> 3.7 µs by its trace).
// W < 8 (S <= 16): 4 is every split of the warp. W = 8: as many as fit the register bounds without a spill (the
// combine kernel's 64 registers keep the B=1 grid, 512 blocks, one wave at 4 blocks per SM; ptxas -v, sm_90a).
template <int W, bool BF16, bool GS>
__host__ __device__ constexpr int combine_prefetch() { return W < 8 ? 4 : BF16 ? (GS ? 4 : 9) : (GS ? 2 : 4); }

template <int W, bool GS = false, bool BF16 = false>
__device__ __forceinline__ void combine_unit(const Params& p, int S, float4 (*part)[32], float (*red)[COMBINE_WARPS],
                                             float (*lse_s)[32], unsigned vblock, int64_t t_end) {
  constexpr int MAXJ = combine_prefetch<W, BF16, GS>();
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int k = warp % W, first = warp - k;  // this warp's index in its unit, the unit's first warp
  using I = typename std::conditional<GS, uint32_t, int64_t>::type;
  const I rows = (I)p.T * (I)p.H;
  const I unit = (I)vblock * (COMBINE_WARPS / W) + warp / W;
  const I grow = unit >> 2;
  const int quarter = (int)(unit & 3);
  const I t = grow < rows ? grow / (I)p.H : 0;
  const bool valid = grow < rows && (int64_t)t < (GS ? t_end : ld_idx(p.qo_indptr, p.qo_is64, p.B));  // uniform per unit
  const int ti = k * 32 + lane;
  const float lse_mine = valid && ti < S ? p.ws_lse[(int64_t)ti * rows + grow] : -INFINITY;
  const float4* src = reinterpret_cast<const float4*>(p.ws_o + (int64_t)grow * D_V + quarter * 128) + lane;
  const uint2* src16 =
      reinterpret_cast<const uint2*>(reinterpret_cast<const __nv_bfloat16*>(p.ws_o) + (int64_t)grow * D_V + quarter * 128) + lane;
  const int64_t split_stride4 = (int64_t)rows * (D_V / 4);
  // one split's 4 columns of this lane: raw (bf16 pairs or fp32), then as fp32 (bf16 -> fp32 is exact)
  using Raw = typename std::conditional<BF16, uint2, float4>::type;
  auto load = [&](int s) -> Raw {
    if constexpr (BF16) return src16[s * split_stride4];
    else return src[s * split_stride4];
  };
  auto as_f32 = [](const Raw& r) -> float4 {
    if constexpr (BF16)
      return make_float4(__uint_as_float(r.x << 16), __uint_as_float(r.x & 0xffff0000u), __uint_as_float(r.y << 16),
                         __uint_as_float(r.y & 0xffff0000u));
    else return r;
  };
  Raw v[MAXJ];
#pragma unroll
  for (int j = 0; j < MAXJ; ++j)
    if (valid && k + j * W < S) v[j] = load(k + j * W);
  lse_s[warp][lane] = lse_mine;  // split s's lse, for the accumulation: lse_s[first + s / 32][s % 32]
  // unit max and weight sum over the splits
  float mx = lse_mine;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
  if (lane == 0) red[0][warp] = mx;
  __syncthreads();
  mx = red[0][first];
#pragma unroll
  for (int j = 1; j < W; ++j) mx = fmaxf(mx, red[0][first + j]);
  float wsum = lse_mine == -INFINITY ? 0.f : exp2f(__fadd_rn(lse_mine, -mx));
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) wsum = __fadd_rn(wsum, __shfl_xor_sync(0xffffffffu, wsum, o));
  if (lane == 0) red[1][warp] = wsum;
  float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
  if (valid) {
    auto add = [&](const float4& x, int s) {
      const float lse = lse_s[first + (s >> 5)][s & 31];
      const float w = lse == -INFINITY ? 0.f : exp2f(__fadd_rn(lse, -mx));
      acc.x = __fadd_rn(acc.x, w > 0.f ? __fmul_rn(w, x.x) : 0.f);
      acc.y = __fadd_rn(acc.y, w > 0.f ? __fmul_rn(w, x.y) : 0.f);
      acc.z = __fadd_rn(acc.z, w > 0.f ? __fmul_rn(w, x.z) : 0.f);
      acc.w = __fadd_rn(acc.w, w > 0.f ? __fmul_rn(w, x.w) : 0.f);
    };
#pragma unroll
    for (int j = 0; j < MAXJ; ++j)
      if (k + j * W < S) add(as_f32(v[j]), k + j * W);
#pragma unroll 4
    for (int s = k + MAXJ * W; s < S; s += W) add(as_f32(load(s)), s);
  }
  part[warp][lane] = acc;
  __syncthreads();
  if (k != 0 || !valid) return;
  float total = 0.f;
  acc = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
  for (int j = 0; j < W; ++j) {
    total = __fadd_rn(total, red[1][first + j]);
    const float4 v = part[first + j][lane];
    acc.x = __fadd_rn(acc.x, v.x); acc.y = __fadd_rn(acc.y, v.y);
    acc.z = __fadd_rn(acc.z, v.z); acc.w = __fadd_rn(acc.w, v.w);
  }
  const float inv = total > 0.f ? __frcp_rn(total) : 0.f;
  const int h = (int)(grow % p.H);
  __nv_bfloat16* dst = p.o + (int64_t)t * p.o_st + (int64_t)h * p.o_sh + quarter * 128 + 4 * lane;
  __nv_bfloat162 lo = __floats2bfloat162_rn(__fmul_rn(acc.x, inv), __fmul_rn(acc.y, inv));
  __nv_bfloat162 hi = __floats2bfloat162_rn(__fmul_rn(acc.z, inv), __fmul_rn(acc.w, inv));
  uint2 pk;
  pk.x = *reinterpret_cast<uint32_t*>(&lo);
  pk.y = *reinterpret_cast<uint32_t*>(&hi);
  *reinterpret_cast<uint2*>(dst) = pk;
}

template <int LW, bool BF16 = false>
__global__ void __launch_bounds__(COMBINE_WARPS * 32) mla_verify_combine_kernel(const Params p) {
  __shared__ float4 part[COMBINE_WARPS][32];
  __shared__ float red[2][COMBINE_WARPS];
  __shared__ float lse_s[COMBINE_WARPS][32];
  // reads kv_indptr only (the split kernel does not write it): overlaps the split kernel's tail
  const int S = effective_splits(p, ld_idx(p.kv_indptr, p.kv_is64, 0), ld_idx(p.kv_indptr, p.kv_is64, p.B));
  const int W = combine_warps_per_unit(S);  // <= LW: S <= p.S
  const long long units = (long long)p.T * p.H * 4, per_block = COMBINE_WARPS / W;
  if (S <= 1 || (long long)blockIdx.x * per_block >= units) {  // block-uniform: nothing to merge here
    if (blockIdx.x == 0) asm volatile("griddepcontrol.wait;\n" ::: "memory");
    return;
  }
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
  if (W == 1) combine_unit<1, false, BF16>(p, S, part, red, lse_s, blockIdx.x, 0);
  else if (LW >= 2 && W == 2) combine_unit<2, false, BF16>(p, S, part, red, lse_s, blockIdx.x, 0);
  else if (LW >= 4 && W == 4) combine_unit<4, false, BF16>(p, S, part, red, lse_s, blockIdx.x, 0);
  else if (LW >= 8) combine_unit<8, false, BF16>(p, S, part, red, lse_s, blockIdx.x, 0);
}

// The units-blocks vblock = blockIdx.x, blockIdx.x + gridDim.x, ... of W (a block-uniform bound);
// part / red are reused by the next units-block after the barrier.
template <int W, bool BF16>
__device__ __forceinline__ void combine_blocks(const Params& p, int S, float4 (*part)[32], float (*red)[COMBINE_WARPS],
                                               float (*lse_s)[32], unsigned units, int64_t t_end) {
  constexpr unsigned per_block = COMBINE_WARPS / W;
#pragma unroll 1
  for (unsigned vb = blockIdx.x; vb * per_block < units; vb += gridDim.x) {
    combine_unit<W, true, BF16>(p, S, part, red, lse_s, vb, t_end);
    __syncthreads();
  }
}

template <int LW, bool BF16 = false>
__global__ void __launch_bounds__(COMBINE_WARPS * 32, 4) mla_verify_combine_gs_kernel(const Params p) {
  __shared__ float4 part[COMBINE_WARPS][32];
  __shared__ float red[2][COMBINE_WARPS];
  __shared__ float lse_s[COMBINE_WARPS][32];
  // reads kv_indptr / qo_indptr only (the split kernel writes neither): overlaps the split kernel's tail
  const int S = effective_splits(p, ld_idx(p.kv_indptr, p.kv_is64, 0), ld_idx(p.kv_indptr, p.kv_is64, p.B));
  const int W = combine_warps_per_unit(S);  // <= LW: S <= p.S
  const long long units = (long long)p.T * p.H * 4, per_block = COMBINE_WARPS / W;
  if (S <= 1 || (long long)blockIdx.x * per_block >= units) {  // block-uniform: nothing to merge here
    if (blockIdx.x == 0) asm volatile("griddepcontrol.wait;\n" ::: "memory");
    return;
  }
  const int64_t t_end = ld_idx(p.qo_indptr, p.qo_is64, p.B);
  const unsigned u32 = (unsigned)units;  // < 2^31 (launch_combine_wpu)
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
  // one loop per W: a W dispatch inside one loop keeps every variant's hoisted invariants live
  // together (ptxas: combine<8> 127 registers)
  if (W == 1) combine_blocks<1, BF16>(p, S, part, red, lse_s, u32, t_end);
  else if (LW >= 2 && W == 2) combine_blocks<2, BF16>(p, S, part, red, lse_s, u32, t_end);
  else if (LW >= 4 && W == 4) combine_blocks<4, BF16>(p, S, part, red, lse_s, u32, t_end);
  else if (LW >= 8) combine_blocks<8, BF16>(p, S, part, red, lse_s, u32, t_end);
}

}  // namespace mlav
