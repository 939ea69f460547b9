// Sparse (DSA) MLA target-verify attention: every query row t attends to its own list of
// physical KV slots page_table_1[t, 0 : seq_lens[t]] (top-k chosen by the indexer), with all H
// heads of the row sharing the list. mma.sync (m16n8k16 bf16) tensor cores, split-K over the
// list positions with an LSE combine.
//
// Layouts:
//   q   [T, H, 576] bf16 (dims 0..511 absorbed nope, 512..575 rope), last dim contiguous
//   kv  bf16 rows of 576 (1152 B) or fp8 rows of 656 B: 512 e4m3, 4 fp32 scales (one per 128
//       dims, value = e4m3 * scale), 64 bf16 rope. V = the first 512 dims of the same row.
//   idx [T, topk] int32; entry p of row t is used iff p < clamp(seq_lens[t], 0, topk) and
//       0 <= idx < num_slots (-1 padding and out-of-range slots are skipped: never read).
//   o   [T, H, 512] bf16; lse [T, H] fp32 natural log (optional); empty rows: o = 0, lse = -inf.
//
// CTA (t, s, m) owns heads [m*BM, m*BM + BM) of row t and positions [s*chunk, s*chunk + chunk).
// S phase: warp (g = w % RG, c = w / RG) computes 16 heads x WN positions over 576 dims.
// PV phase: warp (rw = w / NQ, qd = w % NQ) updates O[16*RB heads, DW = 512/NQ dims of group qd]
// (NQ = 4 dim groups of 128, or 8 of 64 in the 8-warp m16w config).
// The first STAGES tiles are issued before any compute, so a split of <= STAGES tiles has its
// whole KV in flight at once (the small-T latency regime). fp8 tiles land raw in a staging ring
// and are converted into one compute tile (e4m3 -> f16 without the scales, rope bf16), which frees
// the raw stage at once. The per-128-dim scales stay outside the tensor cores: S folds
// s[t, b] * qinv[b, h] per block b over f16 Q (scaled by 2^e per (head, block)), and the PV warps
// of block b multiply P by s[t, b] / sigma_b (sigma_b = running max |s[., b]| of the CTA's
// positions, so the f16 operand stays in [-1, 1]) and rescale O_b by sigma_old / sigma_new with
// the softmax alpha; O_b = sigma_b * accumulator at the end (dsa_verify_n8.cuh does the same).
// Softmax in the log2 domain (scale_log2 = sm_scale * log2 e); partial lse values are log2.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cooperative_groups.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "../../mla_verify/csrc/fp8_e4m3.cuh"
#include "dsa_verify_params.h"

namespace dsav {

constexpr int D_QK = 576;
constexpr int D_V = 512;
constexpr int BF_ROW = 1152;   // bytes of a bf16 row
constexpr int FP8_ROW = 656;   // bytes of an fp8 row
constexpr int BF_CHUNKS = 72;  // 16-byte chunks of a bf16 row
constexpr int FP8_CHUNKS = 41; // 16-byte chunks of an fp8 row (32 e4m3, 1 scales, 8 rope)

// Partials in the workspace (S > 1): ws_o [S, T*H, 512] normalized values (O / l, bounded by max |V|),
// part_t each: fp32, or bf16 in the experimental build -DDSAV_PARTIAL_BF16 (half the bytes written by the
// split CTAs and read by the combine; ws_o keeps its fp32 size). bf16, not f16: a partial spans the
// cache's whole range (fp8 blocks scaled by 2^-62..2^62 in the parity suite), and its rounding (u = 2^-9
// relative) is the size of the output's own. part4_t holds 4 consecutive values.
#ifdef DSAV_PARTIAL_BF16
using part_t = __nv_bfloat16;
using part4_t = uint2;
__device__ __forceinline__ void part_put2(part_t* dst, float a, float b) {
  *reinterpret_cast<__nv_bfloat162*>(dst) = __floats2bfloat162_rn(a, b);
}
__device__ __forceinline__ void part_put4(part_t* dst, float4 v) {
  __nv_bfloat162 lo = __floats2bfloat162_rn(v.x, v.y), hi = __floats2bfloat162_rn(v.z, v.w);
  uint2 pk;
  pk.x = *reinterpret_cast<uint32_t*>(&lo);
  pk.y = *reinterpret_cast<uint32_t*>(&hi);
  *reinterpret_cast<uint2*>(dst) = pk;
}
__device__ __forceinline__ float4 part_get4(uint2 pk) {
  const float2 lo = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&pk.x));
  const float2 hi = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&pk.y));
  return make_float4(lo.x, lo.y, hi.x, hi.y);
}
#else
using part_t = float;
using part4_t = float4;
__device__ __forceinline__ void part_put2(part_t* dst, float a, float b) {
  *reinterpret_cast<float2*>(dst) = make_float2(a, b);
}
__device__ __forceinline__ void part_put4(part_t* dst, float4 v) { *reinterpret_cast<float4*>(dst) = v; }
__device__ __forceinline__ float4 part_get4(float4 v) { return v; }
#endif
__device__ __forceinline__ part_t* part_ptr(float* ws) { return reinterpret_cast<part_t*>(ws); }
__device__ __forceinline__ const part_t* part_ptr(const float* ws) { return reinterpret_cast<const part_t*>(ws); }

// Diagnostic timeline (built only with -DDSAV_TRACE, never in the shipped library): thread 0 of
// every CTA writes %globaltimer (ns) at fixed points into p.trace, 8 words per CTA. Split CTA c
// (c = x + X * (y + Y * z)): 0 entry, 1 prologue issued (its index words have arrived), 2 first
// tile visible, 3 all tiles computed, 4 end, 5 %smid, 6 ntiles. Combine CTA b (after the split
// CTAs' words): 0 entry, 1 griddepcontrol.wait released, 2 end.
#ifdef DSAV_TRACE
__device__ __forceinline__ unsigned long long dsav_now() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
__device__ __forceinline__ unsigned smid_now() {
  unsigned r;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(r));
  return r;
}
#define DSAV_SPLIT_STAMP(k, v)                                                                                  \
  do {                                                                                                          \
    if (threadIdx.x == 0 && p.trace)                                                                            \
      p.trace[8 * ((long long)blockIdx.x + (long long)gridDim.x * (blockIdx.y + (long long)gridDim.y * blockIdx.z)) + \
              (k)] = (v);                                                                                       \
  } while (0)
#define DSAV_COMBINE_STAMP(k)                                                                         \
  do {                                                                                                \
    if (threadIdx.x == 0 && p.trace) p.trace[8 * (p.trace_split_ctas + (long long)blockIdx.x) + (k)] = dsav_now(); \
  } while (0)
#else
#define DSAV_SPLIT_STAMP(k, v) \
  do {                         \
  } while (0)
#define DSAV_COMBINE_STAMP(k) \
  do {                        \
  } while (0)
#endif

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
// 16-byte async copy; src_bytes = 0 zero-fills the destination and reads nothing.
__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

__device__ __forceinline__ void ldsm_x4(uint32_t a, uint32_t& r0, uint32_t& r1, uint32_t& r2, uint32_t& r3) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3) : "r"(a));
}
__device__ __forceinline__ void ldsm_x2(uint32_t a, uint32_t& r0, uint32_t& r1) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];\n" : "=r"(r0), "=r"(r1) : "r"(a));
}
__device__ __forceinline__ void ldsm_x4_t(uint32_t a, uint32_t& r0, uint32_t& r1, uint32_t& r2, uint32_t& r3) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3) : "r"(a));
}
__device__ __forceinline__ void mma_bf16(float* c, uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                                         uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&v);
}
__device__ __forceinline__ uint32_t pack_f16(float lo, float hi) {
  __half2 v = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&v);
}
__device__ __forceinline__ void mma_f16(float* c, uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                                        uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}
__device__ __forceinline__ uint32_t hmul2_u32(uint32_t a, uint32_t b) {
  const __half2 r = __hmul2(*reinterpret_cast<const __half2*>(&a), *reinterpret_cast<const __half2*>(&b));
  return *reinterpret_cast<const uint32_t*>(&r);
}
using fp8e4m3::e4m3x2_to_f16x2;  // two e4m3 bytes -> f16x2 (../../mla_verify/csrc/fp8_e4m3.cuh)
// Byte offset of 16-byte chunk `ch` of row `row` in a swizzled [rows][576] bf16 tile: the low
// three chunk bits are XORed with the row, so the 8 rows of an ldmatrix hit 8 distinct bank groups.
__device__ __forceinline__ uint32_t swz(int row, int ch) {
  return (uint32_t)(row * BF_ROW + (((ch & ~7) | ((ch ^ row) & 7)) << 4));
}

// fp8: 16-byte chunk `ch` (< 32: 16 e4m3 of dims 16 ch ..) of a raw row -> f16 chunks 2 ch, 2 ch + 1
// of row r of a swizzled compute tile, no scale. The store order alternates every 4 chunks, so 8
// consecutive ch (one 8-lane phase) hit 8 distinct bank groups.
__device__ __forceinline__ void fp8_chunk_to_f16(const uint8_t* raw_row, uint8_t* cvt, int r, int ch) {
  const uint4 v = *reinterpret_cast<const uint4*>(raw_row + ch * 16);
  const uint4 lo = make_uint4(e4m3x2_to_f16x2(v.x), e4m3x2_to_f16x2<true>(v.x), e4m3x2_to_f16x2(v.y),
                              e4m3x2_to_f16x2<true>(v.y));
  const uint4 hi = make_uint4(e4m3x2_to_f16x2(v.z), e4m3x2_to_f16x2<true>(v.z), e4m3x2_to_f16x2(v.w),
                              e4m3x2_to_f16x2<true>(v.w));
  const int first = (ch >> 2) & 1;
  *reinterpret_cast<uint4*>(cvt + swz(r, 2 * ch + first)) = first ? hi : lo;
  *reinterpret_cast<uint4*>(cvt + swz(r, 2 * ch + 1 - first)) = first ? lo : hi;
}
// fp8 only: the nope part of the bf16 Q tile rewritten in place as f16, scaled by 2^e per (head,
// 128-dim block) so that its largest |value| lies in [2^14, 2^15); qinv[b * BM + h] = 2^-e. One
// 16-lane group per (head, block), one 16-byte chunk (8 values) per lane.
// PERM (CfgN REG): written to the permuted Q16 rows (C::off_q16, C::QROW16) instead of in place.
// (w64's Q, in column atoms, has its own conversion with sigma folded in: dsa_verify_wgmma.cuh.)
template <typename C, bool PERM = false>
__device__ __forceinline__ void q_nope_to_f16(uint8_t* smem, int tid) {
  float* qinv = reinterpret_cast<float*>(smem + C::off_qinv);
  static_assert(C::THREADS % 16 == 0, "one 16-lane group per (head, block)");
  const unsigned gmask = 0xffffu << (tid & 16);  // this lane's 16-lane group: all in or all out
  constexpr int ITERS = (C::BM * 64 + C::THREADS - 1) / C::THREADS;
#pragma unroll
  for (int it = 0; it < ITERS; ++it) {  // unrolled: the iterations' loads and reductions overlap
    const int u = it * C::THREADS + tid;
    if (u >= C::BM * 64) continue;
    const int r = u >> 6, b = (u >> 4) & 3, ch = b * 16 + (u & 15);
    uint4* ptr = reinterpret_cast<uint4*>(smem + C::off_q + swz(r, ch));
    const uint4 v = *ptr;
    const uint32_t w[4] = {v.x, v.y, v.z, v.w};
    float f[8];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      f[2 * i] = __uint_as_float(w[i] << 16);
      f[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
    }
    float mx = 0.f;
#pragma unroll
    for (int i = 0; i < 8; ++i) mx = fmaxf(mx, fabsf(f[i]));
#pragma unroll
    for (int o = 1; o < 16; o <<= 1) mx = fmaxf(mx, __shfl_xor_sync(gmask, mx, o));
    int e = 0;
    if (mx > 0.f) e = 14 - ilogbf(mx);  // inf / NaN: ilogbf is huge, e clamps low
    e = max(-120, min(120, e));
    const float sc = __int_as_float((127 + e) << 23), inv = __int_as_float((127 - e) << 23);
    const uint32_t h[4] = {pack_f16(f[0] * sc, f[1] * sc), pack_f16(f[2] * sc, f[3] * sc),
                           pack_f16(f[4] * sc, f[5] * sc), pack_f16(f[6] * sc, f[7] * sc)};
    if constexpr (PERM) {
      // dims 8 ch + t, t < 8: segment s = ch / 2 (pair P = s / 2, q = s % 2), lane c = 2 (ch % 2) + t / 4
      uint8_t* dst = smem + C::off_q16 + r * C::QROW16;
      const int sg = ch >> 1, P = sg >> 1, q = sg & 1, c0 = 2 * (ch & 1);
      *reinterpret_cast<uint2*>(dst + (P * 32 + c0 * 8 + q * 4) * 2) = make_uint2(h[0], h[1]);
      *reinterpret_cast<uint2*>(dst + (P * 32 + (c0 + 1) * 8 + q * 4) * 2) = make_uint2(h[2], h[3]);
    } else {
      *ptr = make_uint4(h[0], h[1], h[2], h[3]);
    }
    if ((u & 15) == 0) qinv[b * C::BM + r] = inv;
  }
}

// A split with no visible position (every config): its lse = -inf in the workspace (S > 1), or
// o = 0 and lse = -inf for the CTA's heads of row t (S = 1). rows_total = T * H (the caller's).
template <typename C>
__device__ __forceinline__ void write_empty_split(const Params& p, int t, int s, int h0, int tid, int64_t rows_total) {
  constexpr int BM = C::BM;
  if (p.S > 1) {
    for (int r = tid; r < BM; r += C::THREADS)
      if (h0 + r < p.H) p.ws_lse[(int64_t)s * rows_total + (int64_t)t * p.H + h0 + r] = -INFINITY;
  } else {
    for (int i = tid; i < BM * (D_V / 8); i += C::THREADS) {
      const int r = i / (D_V / 8), ch = i % (D_V / 8);
      if (h0 + r < p.H)
        *reinterpret_cast<uint4*>(p.o + (int64_t)t * p.o_st + (int64_t)(h0 + r) * p.o_sh + ch * 8) =
            make_uint4(0, 0, 0, 0);
    }
    if (p.lse)
      for (int r = tid; r < BM; r += C::THREADS)
        if (h0 + r < p.H) p.lse[(int64_t)t * p.H + h0 + r] = -INFINITY;
  }
}

// One KV row's cp.async copies by the 8 loader lanes of that row (lane `sub` = 0..7): fp8 rows land
// raw (41 chunks of 16 B at FP8_ROW stride), bf16 rows in the swizzled tile layout; !ok
// zero-fills the destination and reads nothing. fp8: chunks sub + 8 it, unrolled so that the
// offsets are immediates (41 = 5 x 8 + 1: lane 0 also takes chunk 40).
template <bool FP8>
__device__ __forceinline__ void issue_kv_row(uint32_t dst, int r, const uint8_t* src, bool ok, int sub) {
  if constexpr (FP8) {
    static_assert(FP8_CHUNKS == 5 * 8 + 1, "five chunks per lane, one more for lane 0");
    const uint32_t d = dst + r * FP8_ROW + sub * 16;
    const uint8_t* s = src + sub * 16;
#pragma unroll
    for (int it = 0; it < 5; ++it) cp_async16(d + it * 128, s + it * 128, ok ? 16 : 0);
    if (sub == 0) cp_async16(d + 5 * 128, s + 5 * 128, ok ? 16 : 0);
  } else {  // chunk sub + 8 it lands at swz(r, sub + 8 it) = the row's swizzled chunk sub, + 128 it
    const uint32_t d = dst + swz(r, sub);
    const uint8_t* s = src + sub * 16;
#pragma unroll
    for (int it = 0; it < BF_CHUNKS / 8; ++it) cp_async16(d + it * 128, s + it * 128, ok ? 16 : 0);
  }
}

template <int BM_, int BN_, int STAGES_, bool FP8_, int WARPS_ = 0>
struct Cfg {
  static constexpr int BM = BM_, BN = BN_, STAGES = STAGES_;
  static constexpr bool FP8 = FP8_;
  static constexpr bool N8 = false;  // heads in the mma M (dsa_verify_n8.cuh: heads in N)
  static constexpr int RB = BM >= 32 ? 2 : 1;      // 16-row blocks per warp in the PV phase
  static constexpr int PV_RW = BM / (16 * RB);     // PV row warps
  static constexpr int WARPS = WARPS_ ? WARPS_ : 4 * PV_RW;
  static constexpr int NQ = WARPS / PV_RW;         // PV dim groups
  static constexpr int DW = D_V / NQ;              // output dims per PV warp
  static constexpr int NBV = DW / 8;               // PV n-blocks per warp
  static constexpr int THREADS = WARPS * 32;
  static constexpr int RG = BM / 16;               // S-phase row groups
  static constexpr int TG = WARPS / RG;            // S-phase column groups
  static constexpr int WN = BN / TG;               // positions per warp in the S phase
  static constexpr int NB_S = WN / 8;
  static constexpr int TPT = THREADS / BN;         // loader threads per KV row
  static constexpr int QTPR = THREADS / BM;        // loader threads per Q row
  static constexpr int RAW_ROW = FP8 ? FP8_ROW : BF_ROW;
  static constexpr int RAW_TILE = BN * RAW_ROW;
  static constexpr int KV_TILE = BN * BF_ROW;
  static constexpr int P_ROW = BN * 2;
  static constexpr int off_q = 0;
  static constexpr int off_raw = BM * BF_ROW;
  static constexpr int off_cvt = off_raw + STAGES * RAW_TILE;
  static constexpr int off_p = off_cvt + (FP8 ? KV_TILE : 0);
  static constexpr int off_red = off_p + BM * P_ROW;  // red_max[TG][BM], red_sum[TG][BM], alpha[BM], m[BM]
  static constexpr int off_flag = off_red + (2 * TG * BM + 2 * BM) * 4;
  // fp8: qinv [4 blocks][BM] (2^-e of the f16 Q), ssc [BN][4] (the compute tile's scales), tmax [4]
  static constexpr int off_qinv = off_flag + (STAGES + 1) * BN * 4;  // + the fp8 compute tile's flags
  static constexpr int off_ssc = off_qinv + (FP8 ? 4 * BM * 4 : 0);
  static constexpr int off_tmax = off_ssc + (FP8 ? BN * 16 : 0);
  static constexpr int bytes = off_tmax + (FP8 ? 16 : 0);
  // S-phase accumulator chains: consecutive k-steps go to different sets so the dependent
  // mma.sync latency overlaps (4 sets when a warp holds one n-block, else 2)
  static constexpr int NACC = NB_S == 1 ? 4 : 2;
  // cluster (fused) combine: each CTA parks its normalized fp32 partial [BM][PSTR] in its own
  // (drained) KV ring and its log2-sum-exp in red_max; the split table [16][BM] goes to the P tile
  static constexpr int PSTR = D_V + 4;
  static constexpr int MAX_CLUSTER = 16;
  static constexpr bool CLUSTER_OK =
      BM * PSTR * 4 <= STAGES * RAW_TILE && MAX_CLUSTER * BM * 4 <= BM * P_ROW && TG * BM >= BM;
  static_assert(WN % 8 == 0 && NB_S >= 1, "S-phase warp tile");
  static_assert(THREADS % BN == 0 && THREADS % BM == 0, "loader split");
  static_assert(WARPS % PV_RW == 0 && NBV % 2 == 0 && NQ * DW == D_V, "PV warp split");
  static_assert(FP8 || BF_CHUNKS % TPT == 0, "bf16 loader split");
  static_assert(BN % 16 == 0, "PV k-steps");
  static constexpr int RPT = BN * 8 / THREADS;     // KV rows per loader thread (8 threads per row)
  static_assert(RPT >= 1 && RPT * THREADS == BN * 8, "loader: 8 threads per row");
};

// Fused combine of the S = p.cluster splits of one (row t, head tile) launched as one thread-block
// cluster (dims 1 x S x 1, rank = split s): after a cluster barrier every CTA reads the S partials
// from its peers' shared memory (DSMEM) and merges dims [rank * 512/S, (rank+1) * 512/S) of every
// head in split order (bitwise deterministic; weights exp2(lse_s - max), an empty split has
// weight 0 and its zero partial is discarded by a select). A second cluster barrier keeps each
// CTA's shared memory alive until all peers have read it. No workspace, no second kernel.
template <typename C>
__device__ __forceinline__ void cluster_combine(const Params& p, uint8_t* smem, int t, int h0) {
  namespace cg = cooperative_groups;
  constexpr int BM = C::BM;
  cg::cluster_group cl = cg::this_cluster();
  const int tid = threadIdx.x;
  const int S = p.cluster;
  const int rank = (int)cl.block_rank();
  float* red_max = reinterpret_cast<float*>(smem + C::off_red);  // [BM] this split's lse (log2)
  float* part = reinterpret_cast<float*>(smem + C::off_raw);     // [BM][PSTR] this split's partial
  float* tab = reinterpret_cast<float*>(smem + C::off_p);        // [S][BM] every split's lse
  const int nh = min(BM, p.H - h0);
  cl.sync();  // every partial of the cluster written (release / acquire at cluster scope)
  for (int i = tid; i < S * BM; i += C::THREADS) {
    const int rs = i / BM, r = i % BM;
    tab[i] = r < nh ? *cl.map_shared_rank(red_max + r, rs) : -INFINITY;
  }
  __syncthreads();
  const int dpr = D_V / S, q4 = dpr / 4;
  for (int u = tid; u < nh * q4; u += C::THREADS) {
    const int r = u / q4, d = rank * dpr + (u % q4) * 4;
    float mx = -INFINITY;
#pragma unroll
    for (int k = 0; k < C::MAX_CLUSTER; ++k)
      if (k < S) mx = fmaxf(mx, tab[k * BM + r]);
    const float mref = mx == -INFINITY ? 0.f : mx;
    float4 v[C::MAX_CLUSTER];
#pragma unroll
    for (int k = 0; k < C::MAX_CLUSTER; ++k)
      if (k < S) v[k] = *reinterpret_cast<const float4*>(cl.map_shared_rank(part + r * C::PSTR + d, k));
    float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
    float wsum = 0.f;
#pragma unroll
    for (int k = 0; k < C::MAX_CLUSTER; ++k) {
      if (k >= S) break;
      const float l = tab[k * BM + r];
      const float w = l == -INFINITY ? 0.f : exp2f(l - mref);
      const bool on = w > 0.f;
      acc.x += on ? w * v[k].x : 0.f;
      acc.y += on ? w * v[k].y : 0.f;
      acc.z += on ? w * v[k].z : 0.f;
      acc.w += on ? w * v[k].w : 0.f;
      wsum += w;
    }
    const float inv = wsum > 0.f ? 1.f / wsum : 0.f;
    __nv_bfloat16* dst = p.o + (int64_t)t * p.o_st + (int64_t)(h0 + r) * p.o_sh + d;
    __nv_bfloat162 lo = __floats2bfloat162_rn(acc.x * inv, acc.y * inv);
    __nv_bfloat162 hi = __floats2bfloat162_rn(acc.z * inv, acc.w * inv);
    uint2 pk;
    pk.x = *reinterpret_cast<uint32_t*>(&lo);
    pk.y = *reinterpret_cast<uint32_t*>(&hi);
    *reinterpret_cast<uint2*>(dst) = pk;
    if (p.lse && d == 0)
      p.lse[(int64_t)t * p.H + h0 + r] = wsum > 0.f ? (mref + log2f(wsum)) * 0.6931471805599453f : -INFINITY;
  }
  cl.sync();  // peers may still be reading this CTA's partial
}

template <typename C>
__global__ void __launch_bounds__(C::THREADS, 1) dsa_verify_split_kernel(const Params p) {
  constexpr int BM = C::BM, BN = C::BN, STAGES = C::STAGES;
  extern __shared__ __align__(128) uint8_t smem[];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int t = blockIdx.x, s = blockIdx.y, m = blockIdx.z;
  const int h0 = m * BM;
  // the whole split grid is resident (host-checked): let the combine grid launch now; its
  // griddepcontrol.wait still waits for this grid's completion and memory flush
  DSAV_SPLIT_STAMP(0, dsav_now());
  if (p.early_trigger) asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
  if (h0 >= p.H) {
    DSAV_SPLIT_STAMP(4, dsav_now());
    return;
  }
  const int64_t rows_total = (int64_t)p.T * p.H;
  const uint32_t sQ = smem_u32(smem + C::off_q), sRaw = smem_u32(smem + C::off_raw);
  // Q first, then the index words of the first STAGES tiles, then seq_lens: all three loads are in
  // flight together (the gather waits for one HBM round trip, not for seq_lens and then the index)
  {
    const int r = tid / C::QTPR, qs = tid % C::QTPR;
    const bool ok = h0 + r < p.H;
    const __nv_bfloat16* src = p.q + (int64_t)t * p.q_st + (int64_t)(ok ? h0 + r : 0) * p.q_sh;
#pragma unroll
    for (int it = 0; it < (BF_CHUNKS + C::QTPR - 1) / C::QTPR; ++it) {
      const int ch = qs + it * C::QTPR;
      if (BF_CHUNKS % C::QTPR == 0 || ch < BF_CHUNKS) cp_async16(sQ + swz(r, ch), src + ch * 8, ok ? 16 : 0);
    }
  }
  // loader: 8 threads per KV row (128 contiguous bytes per row per instruction); thread copies
  // rows lrow + (THREADS / 8) * k, k < RPT, of every tile
  constexpr int RPT = C::RPT;
  const int lrow = tid >> 3, sub = tid & 7;
  const int32_t* idx_row = p.idx + (int64_t)t * p.idx_st;
  const int pb = s * p.chunk;
  int32_t raw_idx[STAGES][RPT];
  {
    const int cend = min(pb + p.chunk, p.topk);
#pragma unroll
    for (int st = 0; st < STAGES; ++st)
#pragma unroll
      for (int k = 0; k < RPT; ++k) {
        const int pos = pb + st * BN + lrow + (C::THREADS / 8) * k;
        raw_idx[st][k] = pos < cend ? __ldg(idx_row + pos) : -1;
      }
  }
  int nv = __ldg(p.seq_lens + t);
  nv = nv < 0 ? 0 : (nv > p.topk ? p.topk : nv);
  const int pe = min(pb + p.chunk, nv);
  const int ntiles = pe > pb ? (pe - pb + BN - 1) / BN : 0;

  float* red_max = reinterpret_cast<float*>(smem + C::off_red);
  float* red_sum = red_max + C::TG * BM;
  float* alpha_s = red_sum + C::TG * BM;
  float* m_s = alpha_s + BM;
  int* flag = reinterpret_cast<int*>(smem + C::off_flag);  // [STAGES + 1][BN] position used?

  if (ntiles == 0 && !p.cluster) {  // nothing visible in this split (cluster mode: the CTA still
    // takes part in the cluster reduction below, with an empty partial: lse = -inf, o = 0)
    cp_async_wait<0>();  // Q's copies (never read)
    write_empty_split<C>(p, t, s, h0, tid, rows_total);
    DSAV_SPLIT_STAMP(4, dsav_now());
    return;
  }

  const uint32_t sP = smem_u32(smem + C::off_p);
  uint8_t* pP = smem + C::off_p;

  auto slot_of_raw = [&](int j, int k, int32_t w) -> int64_t {  // slot of row k of this thread in tile j; -1 = unused
    const int pos = pb + j * BN + lrow + (C::THREADS / 8) * k;
    if (j >= ntiles || pos >= pe) return -1;
    const int64_t sl = (int64_t)w;
    return (sl >= 0 && sl < p.num_slots) ? sl : -1;
  };
  auto slots_of = [&](int j, int64_t (&out)[RPT]) {
#pragma unroll
    for (int k = 0; k < RPT; ++k) {
      const int pos = pb + j * BN + lrow + (C::THREADS / 8) * k;
      out[k] = (j >= ntiles || pos >= pe) ? -1 : slot_of_raw(j, k, __ldg(idx_row + pos));
    }
  };
  auto issue_tile = [&](int stage, const int64_t (&sl)[RPT]) {
    const uint32_t dst = sRaw + stage * C::RAW_TILE;
#pragma unroll
    for (int k = 0; k < RPT; ++k) {
      const int rr = lrow + (C::THREADS / 8) * k;
      const bool ok = sl[k] >= 0;
      const uint8_t* src = p.kv + (ok ? sl[k] : 0) * p.kv_st;
      issue_kv_row<C::FP8>(dst, rr, src, ok, sub);
      if (sub == 0) flag[stage * BN + rr] = ok ? 1 : 0;
    }
  };

  // ---- prologue: the first STAGES tiles (their slots are already loaded) ----
  if constexpr (C::FP8) cp_async_commit();  // fp8: Q alone in the first group, converted below
#pragma unroll
  for (int st = 0; st < STAGES; ++st) {
    if (st < ntiles) {
      int64_t sl[RPT];
#pragma unroll
      for (int k = 0; k < RPT; ++k) sl[k] = slot_of_raw(st, k, raw_idx[st][k]);
      issue_tile(st, sl);
    }
    cp_async_commit();  // group st (bf16: Q rides in group 0; fp8: Q is the group before)
  }
  DSAV_SPLIT_STAMP(1, dsav_now());
  DSAV_SPLIT_STAMP(5, (unsigned long long)smid_now());
  DSAV_SPLIT_STAMP(6, (unsigned long long)ntiles);
  // Where the next tile's index words are checked (slot < num_slots; same slots either way). m32 fp8 keeps them
  // raw and checks them when the tile is issued, as the n8 kernels do: checked right after the fetch, every warp
  // waits for the index round trip at the end of each iteration (SASS: the compare two instructions after the
  // load). Session 16, H200 under the sm_120 occupancy emulation, raw / checked time (dsa_tree_ab, two calls):
  // m32 fp8 B=8 n=8 H=64 0.866 / 0.865, bit-identical output; m32 bf16 1.018-1.020, m16 fp8 T=256 1.025 (twice),
  // T=64 1.007-1.012, natively m16 fp8 0.985-0.993 and bf16 0.997-1.024: those keep the check at the fetch.
  constexpr bool kSlotAtIssue = C::FP8 && BM == 32;
  int32_t next_w[RPT];     // kSlotAtIssue: the next tile's raw index words
  int64_t next_slot[RPT];  // otherwise: the next tile's checked slots
  auto fetch_next = [&](int j) {
    if constexpr (kSlotAtIssue) {
#pragma unroll
      for (int k = 0; k < RPT; ++k) {
        const int pos = pb + j * BN + lrow + (C::THREADS / 8) * k;
        next_w[k] = (j >= ntiles || pos >= pe) ? -1 : __ldg(idx_row + pos);
      }
    } else {
      slots_of(j, next_slot);
    }
  };
  auto issue_next = [&](int stage, int j) {
    if constexpr (kSlotAtIssue) {
#pragma unroll
      for (int k = 0; k < RPT; ++k) next_slot[k] = slot_of_raw(j, k, next_w[k]);
    }
    issue_tile(stage, next_slot);
  };
  fetch_next(STAGES);
  if constexpr (C::FP8) {  // Q (its own group) has landed while the first tiles fly: nope -> f16
    cp_async_wait<STAGES>();
    __syncthreads();
    q_nope_to_f16<C>(smem, tid);  // read by the S phase after the loop's barriers
  }

  float o_acc[C::RB][C::NBV][4];
#pragma unroll
  for (int rb = 0; rb < C::RB; ++rb)
#pragma unroll
    for (int i = 0; i < C::NBV; ++i) o_acc[rb][i][0] = o_acc[rb][i][1] = o_acc[rb][i][2] = o_acc[rb][i][3] = 0.f;
  float m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.f, 0.f};

  const int g = warp % C::RG, c = warp / C::RG;      // S-phase warp tile
  const int rw = warp / C::NQ, qd = warp % C::NQ;    // PV-phase warp tile
  // fp8: the 128-dim scale block of this PV warp's dims, its running max |s| (sig) and this tile's
  // sigma_old / sigma_new (sig_r) and 1 / sigma_new (sig_i)
  const int pv_blk = (qd * C::DW) / 128;
  float sig = 0.f, sig_r = 1.f, sig_i = 0.f;
  static_assert(C::DW <= 128 && 128 % C::DW == 0, "a PV warp's dims lie in one scale block");
  const int rl0 = g * 16 + (lane >> 2);              // S-phase rows of this thread: rl0, rl0 + 8

  for (int j = 0; j < ntiles; ++j) {
    const int stage = j % STAGES;
    cp_async_wait<STAGES - 1>();
    __syncthreads();  // tile j (and Q) visible to all threads
    if (j == 0) DSAV_SPLIT_STAMP(2, dsav_now());
    uint32_t sK;
    if constexpr (C::FP8) {
      // the raw stage into the compute tile: 32 e4m3 chunks -> f16 (no scale), 8 rope chunks copied
      const uint8_t* raw = smem + C::off_raw + stage * C::RAW_TILE;
      uint8_t* cvt = smem + C::off_cvt;
      if (tid < BN) flag[STAGES * BN + tid] = flag[stage * BN + tid];  // the raw stage's flags are reused next
      static_assert(C::THREADS % 32 == 0 && (BN * 32) % C::THREADS == 0, "fp8 chunk tasks");
#pragma unroll 4
      for (int task = tid; task < BN * 32; task += C::THREADS) fp8_chunk_to_f16(raw + (task >> 5) * FP8_ROW, cvt, task >> 5, task & 31);
      for (int task = tid; task < BN * 8; task += C::THREADS) {
        const int row = task >> 3, ch = task & 7;
        *reinterpret_cast<uint4*>(cvt + swz(row, 64 + ch)) = *reinterpret_cast<const uint4*>(raw + row * FP8_ROW + 528 + ch * 16);
      }
      if (warp == 0) {  // the tile's scales, and their max |s| per block
        float4 mx = make_float4(0.f, 0.f, 0.f, 0.f);
        for (int r = lane; r < BN; r += 32) {
          const float4 v = *reinterpret_cast<const float4*>(raw + r * FP8_ROW + 512);
          reinterpret_cast<float4*>(smem + C::off_ssc)[r] = v;
          mx = make_float4(fmaxf(mx.x, fabsf(v.x)), fmaxf(mx.y, fabsf(v.y)), fmaxf(mx.z, fabsf(v.z)), fmaxf(mx.w, fabsf(v.w)));
        }
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) {
          mx.x = fmaxf(mx.x, __shfl_xor_sync(0xffffffffu, mx.x, o));
          mx.y = fmaxf(mx.y, __shfl_xor_sync(0xffffffffu, mx.y, o));
          mx.z = fmaxf(mx.z, __shfl_xor_sync(0xffffffffu, mx.z, o));
          mx.w = fmaxf(mx.w, __shfl_xor_sync(0xffffffffu, mx.w, o));
        }
        if (lane == 0) *reinterpret_cast<float4*>(smem + C::off_tmax) = mx;
      }
      __syncthreads();  // compute tile ready; raw stage free
      if (j + STAGES < ntiles) issue_next(stage, j + STAGES);
      cp_async_commit();
      fetch_next(j + STAGES + 1);
      sK = smem_u32(cvt);
      {  // this PV warp's block: sigma update (every thread of the block computes the same values)
        const float tm = reinterpret_cast<const float*>(smem + C::off_tmax)[pv_blk];
        const float sn = fmaxf(sig, tm);
        sig_r = sn > 0.f ? sig / sn : 1.f;
        sig_i = sn > 0.f ? 1.f / sn : 0.f;
        sig = sn;
      }
    } else {
      sK = sRaw + stage * C::RAW_TILE;
    }
    const int* fl = flag + (C::FP8 ? STAGES : stage) * BN;

    // ---- S = Q K^T: 16 rows x WN positions per warp (NACC accumulator sets over consecutive
    // k-steps, so consecutive mma.sync do not wait on each other's result); fp8: the nope 64-dim
    // groups in f16, folded per 128-dim block with qinv[b, head] * s[position, b], rope in bf16 ----
    float sacc[C::NB_S][4];
    {
      const int qr = g * 16 + (lane & 15), qhi = lane >> 4, tb = c * C::WN;
      auto s_k4 = [&](int k4, float (&sx)[C::NACC][C::NB_S][4], bool f16) {
#pragma unroll
        for (int u = 0; u < 4; ++u) {
          const int kk = k4 * 4 + u;
          float (*acc)[4] = sx[u % C::NACC];
          uint32_t a0, a1, a2, a3;
          ldsm_x4(sQ + swz(qr, 2 * kk + qhi), a0, a1, a2, a3);
          if constexpr (C::NB_S % 2 == 0) {
#pragma unroll
            for (int nb = 0; nb < C::NB_S; nb += 2) {
              const int mi = lane >> 3;
              const int row = tb + nb * 8 + (mi >> 1) * 8 + (lane & 7);
              uint32_t b0, b1, b2, b3;
              ldsm_x4(sK + swz(row, 2 * kk + (mi & 1)), b0, b1, b2, b3);
              if (f16) {
                mma_f16(acc[nb], a0, a1, a2, a3, b0, b1);
                mma_f16(acc[nb + 1], a0, a1, a2, a3, b2, b3);
              } else {
                mma_bf16(acc[nb], a0, a1, a2, a3, b0, b1);
                mma_bf16(acc[nb + 1], a0, a1, a2, a3, b2, b3);
              }
            }
          } else {
#pragma unroll
            for (int nb = 0; nb < C::NB_S; ++nb) {
              const int row = tb + nb * 8 + (lane & 7);
              uint32_t b0, b1;
              ldsm_x2(sK + swz(row, 2 * kk + ((lane >> 3) & 1)), b0, b1);
              if (f16)
                mma_f16(acc[nb], a0, a1, a2, a3, b0, b1);
              else
                mma_bf16(acc[nb], a0, a1, a2, a3, b0, b1);
            }
          }
        }
      };
      auto zero = [&](float (&sx)[C::NACC][C::NB_S][4]) {
#pragma unroll
        for (int a = 0; a < C::NACC; ++a)
#pragma unroll
          for (int i = 0; i < C::NB_S; ++i)
#pragma unroll
            for (int e = 0; e < 4; ++e) sx[a][i][e] = 0.f;
      };
      auto chain_sum = [&](const float (&sx)[C::NACC][C::NB_S][4], int i, int e) {
        float v = sx[0][i][e];
#pragma unroll
        for (int a = 1; a < C::NACC; ++a) v += sx[a][i][e];
        return v;
      };
      float sx[C::NACC][C::NB_S][4];
      if constexpr (C::FP8) {
#pragma unroll
        for (int i = 0; i < C::NB_S; ++i) sacc[i][0] = sacc[i][1] = sacc[i][2] = sacc[i][3] = 0.f;
        const float* qinv = reinterpret_cast<const float*>(smem + C::off_qinv);
        const float* ssc = reinterpret_cast<const float*>(smem + C::off_ssc);
#pragma unroll 1
        for (int bk = 0; bk < 4; ++bk) {
          zero(sx);
          s_k4(2 * bk, sx, true);
          s_k4(2 * bk + 1, sx, true);
          const float q0 = qinv[bk * BM + rl0], q1 = qinv[bk * BM + rl0 + 8];
#pragma unroll
          for (int i = 0; i < C::NB_S; ++i) {
            const int col = c * C::WN + i * 8 + 2 * (lane & 3);
            const float s0 = ssc[col * 4 + bk], s1 = ssc[(col + 1) * 4 + bk];
            // element e: head rl0 (e < 2) or rl0 + 8, position col + (e & 1)
            sacc[i][0] += chain_sum(sx, i, 0) * (q0 * s0);
            sacc[i][1] += chain_sum(sx, i, 1) * (q0 * s1);
            sacc[i][2] += chain_sum(sx, i, 2) * (q1 * s0);
            sacc[i][3] += chain_sum(sx, i, 3) * (q1 * s1);
          }
        }
        zero(sx);
        s_k4(D_V / 64, sx, false);
#pragma unroll
        for (int i = 0; i < C::NB_S; ++i)
#pragma unroll
          for (int e = 0; e < 4; ++e) sacc[i][e] += chain_sum(sx, i, e);
      } else {
        zero(sx);
#pragma unroll 1
        for (int k4 = 0; k4 < D_QK / 64; ++k4) s_k4(k4, sx, false);
#pragma unroll
        for (int i = 0; i < C::NB_S; ++i)
#pragma unroll
          for (int e = 0; e < 4; ++e) sacc[i][e] = chain_sum(sx, i, e);
      }
    }
    // ---- scale + mask, row max over this warp's columns ----
    float tmax[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int nb = 0; nb < C::NB_S; ++nb)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int col = c * C::WN + nb * 8 + 2 * (lane & 3) + (e & 1);
        const float v = fl[col] ? sacc[nb][e] * p.scale_log2 : -INFINITY;
        sacc[nb][e] = v;
        tmax[e >> 1] = fmaxf(tmax[e >> 1], v);
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
    __syncthreads();
    // ---- online softmax, P (bf16) to smem ----
#pragma unroll
    for (int h2 = 0; h2 < 2; ++h2) {
      const int r = rl0 + h2 * 8;
      float mx = red_max[r];
#pragma unroll
      for (int cc = 1; cc < C::TG; ++cc) mx = fmaxf(mx, red_max[cc * BM + r]);
      const float m_new = fmaxf(m_run[h2], mx);
      const float m_use = m_new == -INFINITY ? 0.f : m_new;
      const float alpha = exp2f(m_run[h2] - m_use);  // m_run = -inf gives 0, never -inf - -inf
      m_run[h2] = m_new;
      float psum = 0.f;
#pragma unroll
      for (int nb = 0; nb < C::NB_S; ++nb) {
        const float p0 = exp2f(sacc[nb][2 * h2] - m_use);
        const float p1 = exp2f(sacc[nb][2 * h2 + 1] - m_use);
        psum += p0 + p1;
        const int col = c * C::WN + nb * 8 + 2 * (lane & 3);
        *reinterpret_cast<uint32_t*>(pP + r * C::P_ROW + col * 2) = C::FP8 ? pack_f16(p0, p1) : pack_bf16(p0, p1);
      }
      l_run[h2] = l_run[h2] * alpha + psum;
      if (c == 0 && (lane & 3) == 0) alpha_s[r] = alpha;
    }
    __syncthreads();  // P and alpha visible
    // ---- O = alpha O + P V; fp8: O_b = alpha sigma_old / sigma_new O_b + (P s_b / sigma_new) V^_b ----
#pragma unroll
    for (int rb = 0; rb < C::RB; ++rb) {
      const int r = rw * 16 * C::RB + rb * 16 + (lane >> 2);
      const float al0 = alpha_s[r] * sig_r, al1 = alpha_s[r + 8] * sig_r;  // sig_r = 1 for bf16
#pragma unroll
      for (int i = 0; i < C::NBV; ++i) {
        o_acc[rb][i][0] *= al0; o_acc[rb][i][1] *= al0;
        o_acc[rb][i][2] *= al1; o_acc[rb][i][3] *= al1;
      }
    }
#pragma unroll
    for (int ks = 0; ks < BN / 16; ++ks) {
      uint32_t a[C::RB][4];
#pragma unroll
      for (int rb = 0; rb < C::RB; ++rb) {
        const int r = rw * 16 * C::RB + rb * 16 + (lane & 15);
        ldsm_x4(sP + r * C::P_ROW + (ks * 16 + (lane >> 4) * 8) * 2, a[rb][0], a[rb][1], a[rb][2], a[rb][3]);
      }
      if constexpr (C::FP8) {  // A columns (positions) ks*16 + 2(lane&3) + {0, 1} and + 8: times s / sigma_new
        const float* ssc = reinterpret_cast<const float*>(smem + C::off_ssc);
        const int col = ks * 16 + 2 * (lane & 3);
        const uint32_t flo = pack_f16(ssc[col * 4 + pv_blk] * sig_i, ssc[(col + 1) * 4 + pv_blk] * sig_i);
        const uint32_t fhi = pack_f16(ssc[(col + 8) * 4 + pv_blk] * sig_i, ssc[(col + 9) * 4 + pv_blk] * sig_i);
#pragma unroll
        for (int rb = 0; rb < C::RB; ++rb) {
          a[rb][0] = hmul2_u32(a[rb][0], flo); a[rb][1] = hmul2_u32(a[rb][1], flo);
          a[rb][2] = hmul2_u32(a[rb][2], fhi); a[rb][3] = hmul2_u32(a[rb][3], fhi);
        }
      }
      const int mi = lane >> 3;
      const int row = ks * 16 + (mi & 1) * 8 + (lane & 7);
#pragma unroll
      for (int np = 0; np < C::NBV / 2; ++np) {
        uint32_t b0, b1, b2, b3;
        ldsm_x4_t(sK + swz(row, qd * C::NBV + np * 2 + (mi >> 1)), b0, b1, b2, b3);
#pragma unroll
        for (int rb = 0; rb < C::RB; ++rb) {
          if constexpr (C::FP8) {
            mma_f16(o_acc[rb][2 * np], a[rb][0], a[rb][1], a[rb][2], a[rb][3], b0, b1);
            mma_f16(o_acc[rb][2 * np + 1], a[rb][0], a[rb][1], a[rb][2], a[rb][3], b2, b3);
          } else {
            mma_bf16(o_acc[rb][2 * np], a[rb][0], a[rb][1], a[rb][2], a[rb][3], b0, b1);
            mma_bf16(o_acc[rb][2 * np + 1], a[rb][0], a[rb][1], a[rb][2], a[rb][3], b2, b3);
          }
        }
      }
    }
    if constexpr (!C::FP8) {
      __syncthreads();  // every warp done with this stage before it is refilled
      if (j + STAGES < ntiles) issue_next(stage, j + STAGES);
      cp_async_commit();
      fetch_next(j + STAGES + 1);
    }
  }
  cp_async_wait<0>();
  DSAV_SPLIT_STAMP(3, dsav_now());

  // ---- finalize: row sums across lanes and column groups ----
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
  for (int rb = 0; rb < C::RB; ++rb)
#pragma unroll
    for (int h2 = 0; h2 < 2; ++h2) {
      const int r = rw * 16 * C::RB + rb * 16 + (lane >> 2) + h2 * 8;
      const int h = h0 + r;
      if (h >= p.H) continue;
      float l = red_sum[r];
#pragma unroll
      for (int cc = 1; cc < C::TG; ++cc) l += red_sum[cc * BM + r];
      const float inv = l > 0.f ? (C::FP8 ? sig : 1.f) / l : 0.f;  // fp8: O_b = sigma_b * accumulator
      const float lse2 = l > 0.f ? m_s[r] + log2f(l) : -INFINITY;
      const int64_t grow = (int64_t)t * p.H + h;
      if (p.S == 1) {
        __nv_bfloat16* dst = p.o + (int64_t)t * p.o_st + (int64_t)h * p.o_sh + qd * C::DW + 2 * (lane & 3);
#pragma unroll
        for (int nb = 0; nb < C::NBV; ++nb)
          *reinterpret_cast<__nv_bfloat162*>(dst + nb * 8) =
              __floats2bfloat162_rn(o_acc[rb][nb][2 * h2] * inv, o_acc[rb][nb][2 * h2 + 1] * inv);
        if (p.lse && qd == 0 && (lane & 3) == 0) p.lse[grow] = lse2 * 0.6931471805599453f;
      } else if (!C::CLUSTER_OK || !p.cluster) {
        part_t* dst = part_ptr(p.ws_o) + ((int64_t)s * rows_total + grow) * D_V + qd * C::DW + 2 * (lane & 3);
#pragma unroll
        for (int nb = 0; nb < C::NBV; ++nb)
          part_put2(dst + nb * 8, o_acc[rb][nb][2 * h2] * inv, o_acc[rb][nb][2 * h2 + 1] * inv);
        if (qd == 0 && (lane & 3) == 0) p.ws_lse[(int64_t)s * rows_total + grow] = lse2;
      } else {
        // cluster mode: the partial stays on chip, in this CTA's drained KV ring
        float* dst = reinterpret_cast<float*>(smem + C::off_raw) + r * C::PSTR + qd * C::DW + 2 * (lane & 3);
#pragma unroll
        for (int nb = 0; nb < C::NBV; ++nb)
          *reinterpret_cast<float2*>(dst + nb * 8) =
              make_float2(o_acc[rb][nb][2 * h2] * inv, o_acc[rb][nb][2 * h2 + 1] * inv);
        if (qd == 0 && (lane & 3) == 0) red_max[r] = lse2;
      }
    }
  if constexpr (C::CLUSTER_OK) {
    if (p.cluster) cluster_combine<C>(p, smem, t, h0);
  }
  DSAV_SPLIT_STAMP(4, dsav_now());
}

// Merge the S partials of each (row, head): one warp per (row, 32-dim slice), 16 warps per row.
// Lane = (split group sg = lane / 8, 4 dims d4 = lane % 8): the lane loads the float4 partials of
// splits sg, sg + 4, ... (all issued before the first use), while lane i holds the lse of splits
// i, i+32, ... (S <= 128) for the max and the weights (warp shuffles). The four split groups are
// summed by a fixed xor tree, so the result is bitwise deterministic. An empty split (lse = -inf)
// gets weight 0 and its never-written partial is discarded by a select, never multiplied.
// Launched with programmatic dependent launch where available: griddepcontrol.wait orders it after
// every write of the split kernel.
constexpr int COMBINE_WARPS = 4;
constexpr int COMBINE_SLICES = 16;  // 32-dim slices per (row, head)
constexpr int COMBINE_MAX_SPLITS = 128;

// Entry of both combine kernels: griddepcontrol.wait (every write of the split grid visible), with the
// diagnostic timeline's entry and release stamps around it.
__device__ __forceinline__ void combine_wait(const Params& p) {
  DSAV_COMBINE_STAMP(0);
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
  DSAV_COMBINE_STAMP(1);
}

__global__ void __launch_bounds__(COMBINE_WARPS * 32) dsa_verify_combine_kernel(const Params p) {
  combine_wait(p);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t rows = (int64_t)p.T * p.H;
  const int64_t unit = (int64_t)blockIdx.x * COMBINE_WARPS + warp;
  const int64_t grow = unit / COMBINE_SLICES;
  const int slice = (int)(unit % COMBINE_SLICES);
  if (grow >= rows) {
    DSAV_COMBINE_STAMP(2);
    return;
  }
  const int sg = lane >> 3, d4 = lane & 7;
  const part4_t* src = reinterpret_cast<const part4_t*>(part_ptr(p.ws_o) + grow * D_V + slice * 32) + d4;
  const int64_t sstride4 = rows * (D_V / 4);
  constexpr int PER = COMBINE_MAX_SPLITS / 4;  // splits per lane at most
  float4 v[PER];
#pragma unroll
  for (int i = 0; i < PER; ++i) {
    const int s = 4 * i + sg;
    v[i] = s < p.S ? part_get4(src[(int64_t)s * sstride4]) : make_float4(0.f, 0.f, 0.f, 0.f);
    if (4 * (i + 1) >= p.S) break;
  }
  float l4[4];
  float mx = -INFINITY;
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    const int s = lane + 32 * k;
    l4[k] = s < p.S ? p.ws_lse[(int64_t)s * rows + grow] : -INFINITY;
    mx = fmaxf(mx, l4[k]);
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
  const float mref = mx == -INFINITY ? 0.f : mx;
  float w4[4];
  float wsum = 0.f;
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    w4[k] = l4[k] == -INFINITY ? 0.f : exp2f(l4[k] - mref);
    wsum += w4[k];
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) wsum += __shfl_xor_sync(0xffffffffu, wsum, o);
  float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
  for (int i = 0; i < PER; ++i) {
    if (4 * i >= p.S) break;  // warp-uniform
    const int s = 4 * i + sg;
    const int k = (4 * i) >> 5;  // warp-uniform: the 4 splits of step i share one block of 32
    const float wk = k == 0 ? w4[0] : k == 1 ? w4[1] : k == 2 ? w4[2] : w4[3];
    float w = __shfl_sync(0xffffffffu, wk, s & 31);
    w = s < p.S ? w : 0.f;
    const bool on = w > 0.f;
    acc.x += on ? w * v[i].x : 0.f;
    acc.y += on ? w * v[i].y : 0.f;
    acc.z += on ? w * v[i].z : 0.f;
    acc.w += on ? w * v[i].w : 0.f;
  }
#pragma unroll
  for (int o = 8; o <= 16; o <<= 1) {
    acc.x += __shfl_xor_sync(0xffffffffu, acc.x, o);
    acc.y += __shfl_xor_sync(0xffffffffu, acc.y, o);
    acc.z += __shfl_xor_sync(0xffffffffu, acc.z, o);
    acc.w += __shfl_xor_sync(0xffffffffu, acc.w, o);
  }
  if (sg == 0) {
    const float inv = wsum > 0.f ? 1.f / wsum : 0.f;
    const int64_t t = grow / p.H;
    const int h = (int)(grow % p.H);
    __nv_bfloat16* dst = p.o + t * p.o_st + (int64_t)h * p.o_sh + slice * 32 + 4 * d4;
    __nv_bfloat162 lo = __floats2bfloat162_rn(acc.x * inv, acc.y * inv);
    __nv_bfloat162 hi = __floats2bfloat162_rn(acc.z * inv, acc.w * inv);
    uint2 pk;
    pk.x = *reinterpret_cast<uint32_t*>(&lo);
    pk.y = *reinterpret_cast<uint32_t*>(&hi);
    *reinterpret_cast<uint2*>(dst) = pk;
    if (p.lse && slice == 0 && lane == 0)
      p.lse[grow] = wsum > 0.f ? (mref + log2f(wsum)) * 0.6931471805599453f : -INFINITY;
  }
  DSAV_COMBINE_STAMP(2);
}

// The wide combine (p.combine_wide = 1; the host picks it for T x H >= api.COMBINE_WIDE_MIN_ROWS): one
// warp per (row, head) over all 512 dims instead of 16 warps of 32 dims (T=64 H=64: 4,096 warps in one
// wave instead of 65,536 in ~8; H200 session 12: 0.59-0.97x the sliced kernel's time at T x H >= 512,
// 1.07-1.97x at 256 and 32). Lane l owns dims 4l + 128k (k < 4); splits are summed in order s = 0, 1,
// ... with weights exp2(lse_s - max lse) (an empty split, lse = -inf, is skipped: its partial is never
// read), so the result is bitwise deterministic.
constexpr int COMBINE_WIDE_WARPS = 4;
__global__ void __launch_bounds__(COMBINE_WIDE_WARPS * 32) dsa_verify_combine_wide_kernel(const Params p) {
  combine_wait(p);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t rows = (int64_t)p.T * p.H;
  const int64_t grow = (int64_t)blockIdx.x * COMBINE_WIDE_WARPS + warp;
  if (grow >= rows) {
    DSAV_COMBINE_STAMP(2);
    return;
  }
  float mx = -INFINITY;
  for (int s = lane; s < p.S; s += 32) mx = fmaxf(mx, p.ws_lse[(int64_t)s * rows + grow]);
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
  const float mref = mx == -INFINITY ? 0.f : mx;
  float wsum = 0.f;
  for (int s = lane; s < p.S; s += 32) {
    const float l = p.ws_lse[(int64_t)s * rows + grow];
    wsum += l == -INFINITY ? 0.f : exp2f(l - mref);
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) wsum += __shfl_xor_sync(0xffffffffu, wsum, o);
  float4 acc[4];
#pragma unroll
  for (int k = 0; k < 4; ++k) acc[k] = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll 4
  for (int s = 0; s < p.S; ++s) {
    const float l = p.ws_lse[(int64_t)s * rows + grow];
    const float w = l == -INFINITY ? 0.f : exp2f(l - mref);
    if (w > 0.f) {  // warp-uniform
      const part4_t* src = reinterpret_cast<const part4_t*>(part_ptr(p.ws_o) + ((int64_t)s * rows + grow) * D_V) + lane;
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        const float4 v = part_get4(src[32 * k]);
        acc[k].x += w * v.x;
        acc[k].y += w * v.y;
        acc[k].z += w * v.z;
        acc[k].w += w * v.w;
      }
    }
  }
  const float inv = wsum > 0.f ? 1.f / wsum : 0.f;
  const int64_t t = grow / p.H;
  const int h = (int)(grow % p.H);
  __nv_bfloat16* dst = p.o + t * p.o_st + (int64_t)h * p.o_sh + 4 * lane;
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    __nv_bfloat162 lo = __floats2bfloat162_rn(acc[k].x * inv, acc[k].y * inv);
    __nv_bfloat162 hi = __floats2bfloat162_rn(acc[k].z * inv, acc[k].w * inv);
    uint2 pk;
    pk.x = *reinterpret_cast<uint32_t*>(&lo);
    pk.y = *reinterpret_cast<uint32_t*>(&hi);
    *reinterpret_cast<uint2*>(dst + 128 * k) = pk;
  }
  if (p.lse && lane == 0) p.lse[grow] = wsum > 0.f ? (mref + log2f(wsum)) * 0.6931471805599453f : -INFINITY;
  DSAV_COMBINE_STAMP(2);
}

}  // namespace dsav
