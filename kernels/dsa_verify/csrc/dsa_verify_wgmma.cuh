// sm_90a DSA verify split kernel on warpgroup MMA (wgmma): config "w64", bf16 or fp8 cache, 64 heads
// of one query row per CTA (sm_90a's auto for H > 16: DeepSeek-V3.2 / GLM-5 at low tensor parallelism),
// every head attending to the row's own top-k slot list. The schedule is the dense kernel's
// (kernels/mla_verify/csrc/mla_verify_wgmma.cuh; the tile pieces both use are in
// kernels/mla_verify/csrc/wgmma_tile_sm90.cuh); only the rows and the gather differ.
//
// CTA (t, s, m) = 2 warpgroups (256 threads): heads [64m, 64m + 64) of row t, list positions
// [s*chunk, min(s*chunk + chunk, seq_lens[t])), BN = 64 positions per KV tile, 2 cp.async stages.
// Shared memory (from a 1024-byte aligned base): Q [64 x 576] bf16 and two KV tiles [64 x 576],
// each as nine column atoms of 64 dims (atom = 64 rows x 128 B, 16-byte chunk c of row r at
// r*128 + ((c ^ r%8) << 4): the hardware's 128B swizzle; fp8: f16 nope atoms); P [64 x 64] bf16
// (fp8: f16; one atom); fp32 row max / row sum exchange [2][64] each; the tiles' position-used
// flags [2][64].
//   S = Q K^T : warpgroup g computes all 64 heads x positions [32g, 32g+32) (36 x m64n32k16).
//   softmax   : against a lazy reference max shared by both warpgroups (two block barriers per tile
//               while no head's max rises by more than 2^LAZY_TAU; the exact step otherwise).
//   O += P V  : warpgroup g owns output dims [256g, 256g+256): 4 x m64n256k16, B = dims 0..511
//               of the same KV tile read N-major (V is the first 512 dims of the row).
// Loader: 8 threads per KV row (each cp.async instruction moves 4 rows x 128 contiguous bytes),
// rows tid/8 and tid/8 + 32; an unused position (past seq_lens, -1, a slot >= num_slots) copies
// 0 bytes (zero-fill, nothing read) and its flag masks its logit to -inf.
// FP8 (SGLang's 656-byte rows: 512 e4m3, 4 fp32 scales s[b] per 128-dim block b, 64 bf16 rope). The
// tiles hold f16: V'[t, d] = e4m3[t, d] x f16(s[t, b] / sigma_b) (exact e4m3 -> f16, one f16x2
// multiply), sigma_b a power of two at or above every |s[., b]| the split has stored so far divided by
// SIGMA_SLACK (the lazy sigma below), so |V'| <= 448 x 128 < 65504 and a value carries two f16 roundings
// (2^-11 each; |s| below 2^-24 sigma_b enters as an f16 subnormal, as the other fp8 configs' P * s / sigma).
// Q's nope part is rewritten in place as f16 of q x sigma_b x 2^e[h], one exponent per head over its
// 512 dims (q_nope_sigma_to_f16; qinv = 2^-e[h] lives in the P atom until read into registers), so S
// is the rope chain (bf16, 4 steps) plus one f16 chain over the nope dims (32 steps), issued together
// and folded as qinv[h] x chain
// (session 14: w64's former four 8-step block chains, each waited for and folded with qinv[b, h] x
// sigma_b, took 1.07-1.12x the kernel time at H = 64 and 128). A head's smaller blocks keep f16's relative
// precision down to 2^-28 of its largest |q_b sigma_b|; below that their share of S is below f16's
// rounding of the largest terms. PV runs in f16 on V'
// with P in f16 (P <= 2^LAZY_TAU), and the output block b is multiplied by sigma_b at the end. A
// tile goes global -> registers while S of the tile before it runs (4 threads per row: row 8 warp +
// lane % 8, quarter q = lane / 8 loads e4m3 chunks q + 4i, i < 8, 64 contiguous bytes per row per
// instruction, and the row's 4 scales; the rope goes by cp.async) and registers -> the f16 tile
// while that tile's PV runs. H200 session 11: parity token-exact (rel err 1.74e-3, m64's 1.69e-3),
// 0.43-0.70x m64's fp8 time (docs/kernels/dsa-verify-notes.md).
// Outputs as every DSA config: S = 1 writes o (bf16) and lse (natural log); S > 1 writes the
// normalized fp32 partial and its log2-sum-exp to the workspace for dsa_verify_combine_kernel. S = 1
// stages the CTA's 64 output rows in the drained KV stages and stores them in 16-byte chunks (o's rows
// 16-byte aligned, as api.validate requires unless a dim is 1; else the direct 4-byte stores): the
// epilogue 5.8 -> 2.4 us, 1.02-1.07x the kernel time at S = 1 (H200, session 13 calls 5-6).
// (The split partials keep the direct float2 stores: staged, they measured 0.95-0.98x.)
#pragma once
#include <type_traits>

#include "../../mla_verify/csrc/wgmma_tile_sm90.cuh"
#include "dsa_verify_kernel.cuh"

namespace dsav {

template <bool FP8_>
struct CfgW {
  static constexpr int BM = 64, BN = 64, STAGES = 2, WARPS = 8, THREADS = 256;
  static constexpr bool FP8 = FP8_;
  static constexpr bool N8 = false;
  static constexpr bool CLUSTER_OK = false;  // no fused cluster combine
  static constexpr int MAX_CLUSTER = 0;
  static constexpr int ATOM = 8192;      // one 64-dim column block of a 64-row tile (bytes)
  static constexpr int TILE = 9 * ATOM;  // 73,728 B: 64 rows x 576 dims
  static constexpr int off_q = 0;
  static constexpr int off_kv = TILE;
  static constexpr int off_p = off_kv + STAGES * TILE;
  static constexpr int off_red = off_p + ATOM;
  static constexpr int off_flag = off_red + 4 * BM * 4;
  // fp8: qinv [BM] (2^-e[h] of the f16 Q) in the P atom until read into registers before the
  // loop; the sigma partials [WARPS][4] in the row-sum half of off_red (free until the end)
  static constexpr int off_qinv = off_p;
  static constexpr int used = off_flag + STAGES * BN * 4;
  static constexpr int bytes = used + 1024;  // slack to align the base to 1024 B (swizzle period)
  // log2 units: P is computed against the shared m_run while no head's max exceeds it by more
  // than this (P <= 2^8: bf16 keeps its relative precision, fp32 O and l stay far from overflow)
  static constexpr float LAZY_TAU = 8.f;
  // the S = 1 epilogue stages the CTA's output rows (bf16) in the drained KV stages, rows of STG_BF bytes
  // (16 bytes of padding put the 8 rows a warp's stores touch on distinct banks), then copies them out in
  // 16-byte chunks, a warp per 512 contiguous bytes
  static constexpr int STG_BF = D_V * 2 + 16;
  static_assert(BM * STG_BF <= STAGES * TILE, "the staged output fits the KV stages");
  static constexpr float SIGMA_SLACK = 128.f;  // fp8: the lazy sigma's headroom (below)
};

// fp8's lazy sigma (session 15; it replaced a prepass that read the split's 2,048 scale words before the first
// tile, ~12 us of the prologue at T=256: 0.97-1.00x the fp8 time at H >= 16, H200 session 15 call 2).
// sigma_b starts as the power of two at or above tile 0's block maximum, from the scales tile 0's loader
// holds. V' = e4m3 x s / sigma_b stays within f16 while s <= SIGMA_SLACK x sigma_b (448 x 128 < 65504), so a
// later tile only forces the exact step when one of its scales exceeds that. The loader threads compare their
// row's 4 scales when they store the tile (the registers have landed by then), the vote rides on the next
// iteration's first barrier, and only then, rarely, the CTA loads that tile again, takes the new power-of-two
// sigma_b, stores the tile with it, rescales O_b by old / new, and reloads Q from global memory to convert it
// again (the f16 Q cannot be rescaled exactly: a block converted with a zero sigma holds zeros). Session 15
// call 1 had the compare ahead of the softmax barrier: it waited there for tile j+1's loads (+8% per tile).

// The power of two at or above x >= 0 (0 stays 0; a subnormal x gives 2^-126; above 2^127: inf).
__device__ __forceinline__ float pow2_ceil(float x) {
  uint32_t u = __float_as_uint(x);
  if (u == 0u) return 0.f;
  if (u & 0x7fffffu) u = (u & 0x7f800000u) + 0x800000u;
  return __uint_as_float(u & 0xff800000u);
}

// fp8: 8 e4m3 values (a: bytes 0..3, b: 4..7, low byte first) times h (f16x2, both halves the
// factor) -> 8 f16 (one 16-byte chunk): e4m3 -> f16 exactly, one f16x2 multiply (one rounding, subnormals
// kept). H200 session 11 call 2: 0.944-0.979x the time of an fp32 multiply per value (e4m3 -> f16 ->
// f32, x f, one rounding), rel err 1.74e-3 against 1.69e-3, token-exact either way.
__device__ __forceinline__ uint4 e4m3x8_to_f16x8_times(uint32_t a, uint32_t b, uint32_t h) {
  return make_uint4(hmul2_u32(e4m3x2_to_f16x2(a), h), hmul2_u32(e4m3x2_to_f16x2<true>(a), h),
                    hmul2_u32(e4m3x2_to_f16x2(b), h), hmul2_u32(e4m3x2_to_f16x2<true>(b), h));
}
__device__ __forceinline__ void st_shared_u4(uint32_t addr, uint4 v) {
  asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w) : "memory");
}

// w64 fp8: Q's nope part (bf16, 64 heads x 64 chunks of 8 dims in the swizzled atoms) rewritten
// in place as f16 of q[h, d] x sigma_b(d) x 2^e[h], e[h] = 14 - ilogb(max_d |q sigma|) (clamped to
// +-120), one warp per head (lane: chunks lane and lane + 32, blocks lane / 16 and 2 + lane / 16);
// qinv[h] = 2^-e[h] at off_qinv. The head loop stays rolled: unrolled (x8, inlined twice) it was ~40% of
// the w64 fp8 kernel's SASS (6,464 -> 4,776 instructions rolled, 0 spills) and its first launch after other
// kernels paid 4.2 us of cold instruction fetch at B=1 n=4 H=64 L=32k, 0.18 us rolled (H200 session 24 call 2).
template <typename C>
__device__ __forceinline__ void q_nope_sigma_to_f16(uint8_t* smem, int tid, const float (&sig)[4]) {
  float* qinv = reinterpret_cast<float*>(smem + C::off_qinv);
  const int lane = tid & 31, warp = tid >> 5;
#pragma unroll 1
  for (int it = 0; it < C::BM / C::WARPS; ++it) {
    const int r = it * C::WARPS + warp;
    uint4* ptr[2];
    float f[2][8];
    float mx = 0.f;
#pragma unroll
    for (int k = 0; k < 2; ++k) {
      const int ch = lane + 32 * k;
      ptr[k] = reinterpret_cast<uint4*>(smem + C::off_q + (ch >> 3) * C::ATOM + r * 128 + (((ch & 7) ^ (r & 7)) << 4));
      const uint4 v = *ptr[k];
      const uint32_t w[4] = {v.x, v.y, v.z, v.w};
      const float sg = (lane >> 4) ? sig[2 * k + 1] : sig[2 * k];  // block ch / 16 (no local-memory index)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        f[k][2 * i] = __uint_as_float(w[i] << 16) * sg;
        f[k][2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u) * sg;
      }
#pragma unroll
      for (int i = 0; i < 8; ++i) mx = fmaxf(mx, fabsf(f[k][i]));
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
    int e = 0;
    if (mx > 0.f) e = 14 - ilogbf(mx);  // inf / NaN: ilogbf is huge, e clamps low
    e = max(-120, min(120, e));
    const float sc = __int_as_float((127 + e) << 23), inv = __int_as_float((127 - e) << 23);
#pragma unroll
    for (int k = 0; k < 2; ++k)
      *ptr[k] = make_uint4(pack_f16(f[k][0] * sc, f[k][1] * sc), pack_f16(f[k][2] * sc, f[k][3] * sc),
                           pack_f16(f[k][4] * sc, f[k][5] * sc), pack_f16(f[k][6] * sc, f[k][7] * sc));
    if (lane == 0) qinv[r] = inv;
  }
}

template <typename C>
struct IsWgmma : std::false_type {};
template <bool F>
struct IsWgmma<CfgW<F>> : std::true_type {};

// Diagnostic (DSAV_TRACE builds only): thread 0 sums SM cycles per loop phase over the CTA's tiles
// (0: top wait + barrier, 1: S to its logits, 2: softmax to PV issued, 3: fp8 store + PV wait) and
// writes them into timeline word 7 as four 16-bit fields in units of 16 cycles (field k at bits 16k).
#ifdef DSAV_TRACE
#define W64_PHASE(k)                        \
  do {                                      \
    const long long now_ = clock64();       \
    ph_cycles[k] += (unsigned long long)(now_ - ph_t); \
    ph_t = now_;                            \
  } while (0)
#else
#define W64_PHASE(k) \
  do {               \
  } while (0)
#endif

template <typename C>
__global__ void __launch_bounds__(C::THREADS, 1) dsa_verify_wgmma_kernel(const Params p) {
  using namespace sm90wg;
  constexpr int BM = C::BM, BN = C::BN, ATOM = C::ATOM, TILE = C::TILE;
  extern __shared__ __align__(1024) uint8_t smem_raw[];
  const uint32_t raw = smem_u32(smem_raw);
  const uint32_t base = (raw + 1023u) & ~1023u;
  uint8_t* smem = smem_raw + (base - raw);
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int grp = warp >> 2, wq = warp & 3;  // warpgroup, warp within it (heads 16wq..16wq+15)
  const int t = blockIdx.x, s = blockIdx.y, h0 = blockIdx.z * BM;
  if (p.early_trigger) asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
  if (h0 >= p.H) return;
  DSAV_SPLIT_STAMP(0, dsav_now());
#ifdef DSAV_TRACE
  unsigned long long ph_cycles[4] = {0ull, 0ull, 0ull, 0ull};
  long long ph_t = 0;
#endif
  const int64_t rows_total = (int64_t)p.T * p.H;
  const uint32_t sQ = base + C::off_q, sKV = base + C::off_kv, sP = base + C::off_p;
  uint8_t* pP = smem + C::off_p;
  float* red_max = reinterpret_cast<float*>(smem + C::off_red);  // [2][BM]
  float* red_sum = red_max + 2 * BM;                             // [2][BM]
  int* flag = reinterpret_cast<int*>(smem + C::off_flag);        // [STAGES][BN] position used?

  // Loader lanes: rows lrow and lrow + 32 of a tile, 16-byte chunks sub + 8 it (it < 9) of each:
  // chunk sub + 8 it lies in atom it at the row's swizzled position of chunk sub (rows lrow and
  // lrow + 32 share lrow % 8), so the smem offsets are immediates past two per-thread bases.
  const int lrow = tid >> 3, sub = tid & 7;
  const uint32_t loff[2] = {(uint32_t)(lrow * 128 + ((sub ^ (lrow & 7)) << 4)),
                            (uint32_t)((lrow + 32) * 128 + ((sub ^ (lrow & 7)) << 4))};
  auto copy_row = [&](uint32_t tile, uint32_t off, const uint8_t* src, bool ok) {
    const uint8_t* g = src + sub * 16;
#pragma unroll
    for (int it = 0; it < 9; ++it) cp_async16(tile + it * ATOM + off, g + it * 128, ok ? 16 : 0);
  };
  auto issue_q = [&]() {  // the CTA's 64 Q rows (bf16) into sQ; padded heads zero-filled
#pragma unroll
    for (int k = 0; k < 2; ++k) {
      const int h = h0 + lrow + 32 * k;
      const bool ok = h < p.H;
      const uint8_t* src = reinterpret_cast<const uint8_t*>(p.q + (int64_t)t * p.q_st + (int64_t)(ok ? h : h0) * p.q_sh);
      copy_row(sQ, loff[k], src, ok);
    }
  };
  // Q first, then the index words of the first three tiles, then seq_lens: all in flight together
  issue_q();
  const int32_t* idx_row = p.idx + (int64_t)t * p.idx_st;
  const int pb = s * p.chunk;
  const int cend = min(pb + p.chunk, p.topk);
  const int fr = warp * 8 + (lane & 7), fq = lane >> 3;  // fp8 loader: tile row, quarter of it
  auto idx_words = [&](int j, int32_t (&w)[2]) {  // this thread's index words of tile j (-1: none)
    if constexpr (C::FP8) {  // row fr
      const int pos = pb + j * BN + fr;
      w[0] = pos < cend ? __ldg(idx_row + pos) : -1;
      w[1] = -1;
    } else {  // rows lrow, lrow + 32
#pragma unroll
      for (int k = 0; k < 2; ++k) {
        const int pos = pb + j * BN + lrow + 32 * k;
        w[k] = pos < cend ? __ldg(idx_row + pos) : -1;
      }
    }
  };
  int32_t w0[2], w1[2], wnext[2];
  idx_words(0, w0);
  idx_words(1, w1);
  idx_words(2, wnext);
  int nv = __ldg(p.seq_lens + t);
  nv = nv < 0 ? 0 : (nv > p.topk ? p.topk : nv);
  const int pe = min(pb + p.chunk, nv);
  const int ntiles = pe > pb ? (pe - pb + BN - 1) / BN : 0;
  if (ntiles == 0) {
    cp_async_wait<0>();  // Q's copies (never read)
    write_empty_split<C>(p, t, s, h0, tid, rows_total);
    DSAV_SPLIT_STAMP(4, dsav_now());
    return;
  }
  auto issue_tile = [&](int j, const int32_t (&w)[2]) {  // tile j into stage j % 2, with its flags
    const uint32_t tile = sKV + (j & 1) * TILE;
#pragma unroll
    for (int k = 0; k < 2; ++k) {
      const int pos = pb + j * BN + lrow + 32 * k;
      const bool ok = pos < pe && w[k] >= 0 && (int64_t)w[k] < p.num_slots;
      copy_row(tile, loff[k], p.kv + (ok ? (int64_t)w[k] : 0) * p.kv_st, ok);
      if (sub == 0) flag[(j & 1) * BN + lrow + 32 * k] = ok ? 1 : 0;
    }
  };
  // fp8: a tile's row fr (quarter fq) in registers between its load and its store
  uint4 f8[C::FP8 ? 8 : 1];
  float4 f8s = make_float4(0.f, 0.f, 0.f, 0.f);
  int f8_stage = -1;                                // the stage the registers go to (-1: none)
  float sig_inv[4] = {0.f, 0.f, 0.f, 0.f};          // 1 / sigma_b (0 when sigma_b is 0)
  float g[2] = {0.f, 0.f};                          // 2^-e[h] of the f16 Q of heads r0, r0 + 8
  float sig_o[2] = {0.f, 0.f};                      // sigma of this warpgroup's output blocks 2 grp, +1
  auto load_fp8 = [&](int j, int32_t w) {  // tile j's row fr: e4m3 and scales -> registers, rope by cp.async
    if constexpr (C::FP8) {
      const int pos = pb + j * BN + fr;
      const bool ok = pos < pe && w >= 0 && (int64_t)w < p.num_slots;
      const uint8_t* row = p.kv + (ok ? (int64_t)w : 0) * p.kv_st;
      if (ok) {
        const uint4* e = reinterpret_cast<const uint4*>(row) + fq;
#pragma unroll
        for (int i = 0; i < 8; ++i) f8[i] = __ldg(e + 4 * i);
        f8s = __ldg(reinterpret_cast<const float4*>(row + D_V));
      } else {  // unused position: a zero row (never read), masked by its flag
#pragma unroll
        for (int i = 0; i < 8; ++i) f8[i] = make_uint4(0u, 0u, 0u, 0u);
        f8s = make_float4(0.f, 0.f, 0.f, 0.f);
      }
      const uint32_t rope = sKV + (j & 1) * TILE + 8 * ATOM + fr * 128;
      const uint8_t* src = row + D_V + 16 + 32 * fq;
      cp_async16(rope + (((2 * fq) ^ (fr & 7)) << 4), src, ok ? 16 : 0);
      cp_async16(rope + (((2 * fq + 1) ^ (fr & 7)) << 4), src + 16, ok ? 16 : 0);
      if (fq == 0) flag[(j & 1) * BN + fr] = ok ? 1 : 0;
      f8_stage = j & 1;
    }
  };
  auto store_fp8 = [&]() {  // the registers -> V' into the f16 tile (e4m3 chunk fq + 4i -> atom i)
    if constexpr (C::FP8) {
      if (f8_stage < 0) return;
      const uint32_t row = sKV + f8_stage * TILE + fr * 128;
      const uint32_t p0 = ((2 * fq) ^ (fr & 7)) << 4, p1 = ((2 * fq + 1) ^ (fr & 7)) << 4;
      const float f[4] = {f8s.x * sig_inv[0], f8s.y * sig_inv[1], f8s.z * sig_inv[2], f8s.w * sig_inv[3]};
#pragma unroll
      for (int i = 0; i < 8; ++i) {  // chunk fq + 4i: dims 16 fq + 64 i .., 128-dim block i / 2
        const uint32_t h = pack_f16(f[i >> 1], f[i >> 1]);
        st_shared_u4(row + i * ATOM + p0, e4m3x8_to_f16x8_times(f8[i].x, f8[i].y, h));
        st_shared_u4(row + i * ATOM + p1, e4m3x8_to_f16x8_times(f8[i].z, f8[i].w, h));
      }
      f8_stage = -1;
    }
  };
  // fp8 sigma: per-warp block maxima of |s| into the row-sum half of off_red (free until the end), and the
  // CTA's maxima from them after a barrier
  auto publish_scale_max = [&](float (&m)[4]) {
#pragma unroll
    for (int b = 0; b < 4; ++b) {
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) m[b] = fmaxf(m[b], __shfl_xor_sync(0xffffffffu, m[b], o));
      if (lane == 0) red_sum[warp * 4 + b] = m[b];
    }
  };
  auto cta_scale_max = [&](int b) {
    float m = 0.f;
#pragma unroll
    for (int w = 0; w < C::WARPS; ++w) m = fmaxf(m, red_sum[w * 4 + b]);
    return m;
  };
  auto loaded_scale_abs = [&](float (&m)[4]) {  // |s| of the row in the fp8 registers (a NaN scale: 0)
    const float v[4] = {f8s.x, f8s.y, f8s.z, f8s.w};
#pragma unroll
    for (int b = 0; b < 4; ++b) m[b] = v[b] == v[b] ? fabsf(v[b]) : 0.f;
  };
  const int r0 = wq * 16 + (lane >> 2);  // tile rows (heads h0 + r) of this thread: r0 and r0 + 8
  float sig_cur[4] = {0.f, 0.f, 0.f, 0.f};  // fp8: sigma_b in use (powers of two)
  if constexpr (C::FP8) {
    cp_async_commit();  // group: Q
    // sigma_b from tile 0's rows (the scales its loader holds): per-warp maxima, the CTA's after the barrier
    float smax[4];
    load_fp8(0, w0[0]);
    loaded_scale_abs(smax);
    publish_scale_max(smax);
    cp_async_commit();  // group: tile 0's rope
    cp_async_wait<1>();
    __syncthreads();  // Q visible to every thread
#pragma unroll
    for (int b = 0; b < 4; ++b) sig_cur[b] = pow2_ceil(cta_scale_max(b));  // maxima written before the barrier
    q_nope_sigma_to_f16<C>(smem, tid, sig_cur);
    __syncthreads();  // the f16 Q, qinv and the sigma partials visible
    const float* qinv = reinterpret_cast<const float*>(smem + C::off_qinv);
    g[0] = qinv[r0];
    g[1] = qinv[r0 + 8];
#pragma unroll
    for (int b = 0; b < 4; ++b) {
      sig_inv[b] = sig_cur[b] > 0.f ? 1.f / sig_cur[b] : 0.f;
      if ((b >> 1) == grp) sig_o[b & 1] = sig_cur[b];
    }
    store_fp8();  // tile 0 into stage 0 (waits for its loads); the loop's first barrier publishes it
  } else {
    issue_tile(0, w0);
    cp_async_commit();  // group 0: Q and tile 0
    if (ntiles > 1) issue_tile(1, w1);
    cp_async_commit();  // group 1: tile 1 (empty when there is none)
  }

  float o[128];
#pragma unroll
  for (int i = 0; i < 128; ++i) o[i] = 0.f;
  float m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.f, 0.f};

  DSAV_SPLIT_STAMP(1, dsav_now());
  DSAV_SPLIT_STAMP(5, (unsigned long long)smid_now());
  DSAV_SPLIT_STAMP(6, (unsigned long long)ntiles);
#ifdef DSAV_TRACE
  ph_t = clock64();
#endif
  bool resig = false;  // fp8: a scale of the tile this thread stored last exceeds SIGMA_SLACK x sigma_b
  for (int j = 0; j < ntiles; ++j) {
    if (C::FP8 || j > 0)
      cp_async_wait<0>();  // fp8: tile j's rope
    else
      cp_async_wait<1>();  // tile 1 stays in flight
    fence_proxy_async();
    // tile j (and Q) visible to wgmma; every warp done with tile j-1 and its flags
    if constexpr (C::FP8) {
      if (__syncthreads_or(resig)) {  // rare (CTA-uniform): tile j again, with a new sigma_b
        const int pos = pb + j * BN + fr;
        load_fp8(j, pos < cend ? __ldg(idx_row + pos) : -1);  // the rope copy repeats the same bytes
        issue_q();  // the P atom (qinv's place) and Q are free: every PV(j-1) has completed
        cp_async_commit();
        cp_async_wait<0>();
        float tm[4];
        loaded_scale_abs(tm);
        publish_scale_max(tm);
        __syncthreads();  // Q and the block maxima visible
        float rat[4];     // old / new sigma_b: exact (powers of two; sig_cur 0: O_b is 0 anyway)
#pragma unroll
        for (int b = 0; b < 4; ++b) {
          const float t = cta_scale_max(b);
          const float ns = t > C::SIGMA_SLACK * sig_cur[b] ? pow2_ceil(t) : sig_cur[b];
          rat[b] = ns > 0.f ? sig_cur[b] / ns : 1.f;
          sig_cur[b] = ns;
          sig_inv[b] = ns > 0.f ? 1.f / ns : 0.f;
          if ((b >> 1) == grp) sig_o[b & 1] = ns;
        }
        const float ra = grp ? rat[2] : rat[0], rb = grp ? rat[3] : rat[1];  // this warpgroup's blocks
#pragma unroll
        for (int i = 0; i < 32; ++i) {
          const float r = i < 16 ? ra : rb;
#pragma unroll
          for (int e = 0; e < 4; ++e) o[4 * i + e] *= r;
        }
        q_nope_sigma_to_f16<C>(smem, tid, sig_cur);
        store_fp8();
        fence_proxy_async();
        __syncthreads();  // the f16 Q, qinv and tile j visible
        const float* qinv = reinterpret_cast<const float*>(smem + C::off_qinv);
        g[0] = qinv[r0];
        g[1] = qinv[r0 + 8];
        resig = false;
        __syncthreads();  // qinv read by every thread before this tile's P overwrites the P atom
      }
    } else {
      __syncthreads();
    }
    if (j == 0) DSAV_SPLIT_STAMP(2, dsav_now());
    W64_PHASE(0);
    const uint32_t sK = sKV + (j & 1) * TILE;

    // ---- S = Q K^T: 64 heads x positions [32 grp, 32 grp + 32); tile j+1's loads issue meanwhile
    // (fp8: into registers, stored under PV(j)) ----
    float sc[16];  // not zeroed: the first wgmma overwrites it (scale-d = 0)
    if constexpr (C::FP8) {
      // rope (bf16) into sc and the nope part (f16, sigma_b in Q) into a0 as one commit group; tile j+1's
      // loads issue while it runs; then sc += 2^-e[h] x a0
      float a0[16];
      wgmma_fence();
      issue_qk_steps<32, 4>(sc, sQ, sK, grp);
      issue_qk_steps<0, 32, true>(a0, sQ, sK, grp);
      wgmma_commit();
      if (j + 1 < ntiles) {  // tile j+1 into registers (stored under PV(j)), its rope by cp.async
        load_fp8(j + 1, j == 0 ? w1[0] : wnext[0]);
        if (j >= 1) idx_words(j + 2, wnext);
      }
      cp_async_commit();
      wgmma_wait0();
      fence_regs<16>(sc);
      fence_regs<16>(a0);
#pragma unroll
      for (int i = 0; i < 16; ++i) sc[i] += a0[i] * g[(i >> 1) & 1];  // element 4k + e: row half e / 2
    } else {
      wgmma_fence();
      issue_qk(sc, sQ, sK, grp);
      wgmma_commit();
      if (j >= 1 && j + 1 < ntiles) {  // tile 1 was issued by the prologue
        issue_tile(j + 1, wnext);
        idx_words(j + 2, wnext);
      }
      cp_async_commit();
      wgmma_wait0();
      fence_regs<16>(sc);
    }

    W64_PHASE(1);
    // ---- scale + mask (unused positions -> -inf), row max over this warpgroup's 32 columns ----
    const int* fl = flag + (j & 1) * BN + grp * 32 + 2 * (lane & 3);
    float tmax[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int2 f = *reinterpret_cast<const int2*>(fl + i * 8);
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const float v = ((e & 1) ? f.y : f.x) ? sc[4 * i + e] * p.scale_log2 : -INFINITY;
        sc[4 * i + e] = v;
        tmax[e >> 1] = fmaxf(tmax[e >> 1], v);
      }
    }
    // ---- online softmax against the lazy reference max (as the dense wgmma kernel): each
    // warpgroup writes P at the shared m_run unless some head's max exceeds it by more than
    // LAZY_TAU; then every thread takes the exact step (new m_run from both halves' maxima, P
    // rewritten, O and l rescaled) behind a second barrier. m_run stays equal in both warpgroups. ----
    const bool over = publish_row_max(tmax, m_run, red_max, grp, r0, lane, C::LAZY_TAU);
    float psum[2];
    if (!over) write_p<C::FP8>(pP, sc, m_run, psum, grp, r0, lane, 1.f);
    fence_proxy_async();
    // every thread's P and maxima visible; both warpgroups done reading K of this tile
    if (__syncthreads_or(over)) {
      float alpha[2];
      exact_max(m_run, alpha, red_max, r0);
      write_p<C::FP8>(pP, sc, m_run, psum, grp, r0, lane, 1.f);
#pragma unroll
      for (int h = 0; h < 2; ++h) l_run[h] = l_run[h] * alpha[h] + psum[h];
      rescale_o(o, alpha);
      fence_proxy_async();
      __syncthreads();  // the rewritten P visible to wgmma
    } else {
#pragma unroll
      for (int h = 0; h < 2; ++h) l_run[h] += psum[h];
    }

    // ---- O[:, 256 grp .. +256] += P V ----
    fence_regs<128>(o);
    wgmma_fence();
    issue_pv<C::FP8>(o, sP, sK, grp);
    wgmma_commit();
    W64_PHASE(2);
    if constexpr (C::FP8) {  // the stored row's scales against the sigma it is stored with (NaN compares false)
      if (f8_stage >= 0)
        resig = fabsf(f8s.x) > C::SIGMA_SLACK * sig_cur[0] || fabsf(f8s.y) > C::SIGMA_SLACK * sig_cur[1] ||
                fabsf(f8s.z) > C::SIGMA_SLACK * sig_cur[2] || fabsf(f8s.w) > C::SIGMA_SLACK * sig_cur[3];
    }
    store_fp8();  // fp8: tile j+1 into the stage freed at this iteration's first barrier, under PV(j)
    wgmma_wait0();
    fence_regs<128>(o);
    W64_PHASE(3);
  }
  cp_async_wait<0>();
  DSAV_SPLIT_STAMP(3, dsav_now());
#ifdef DSAV_TRACE
  {
    unsigned long long packed = 0;
#pragma unroll
    for (int k = 0; k < 4; ++k) packed |= (ph_cycles[k] >> 4 < 0xffffull ? ph_cycles[k] >> 4 : 0xffffull) << (16 * k);
    DSAV_SPLIT_STAMP(7, packed);
  }
#endif

  // ---- finalize: row sums of both halves, normalized output or split partial ----
  publish_row_sums(l_run, red_sum, grp, r0, lane);
  __syncthreads();  // also: every warp is past its last PV, the KV stages are free for the staging
  // S = 1 with 16-byte aligned output rows: staged (the header). A split's fp32 partial keeps the direct
  // stores: staged it measured 0.95x at B=1 (S = 16, one tile per split) and 0.98x with fp8 at S = 2.
  const bool staged =
      p.S == 1 && ((reinterpret_cast<uintptr_t>(p.o) | (uintptr_t)(p.o_st * 2) | (uintptr_t)(p.o_sh * 2)) & 15) == 0;
  uint8_t* stg = smem + C::off_kv;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int r = r0 + 8 * h;
    const int head = h0 + r;
    if (head >= p.H) continue;  // padded head: write nothing
    const float l = red_sum[r] + red_sum[BM + r];
    const float inv = l > 0.f ? 1.f / l : 0.f;
    const float inv0 = C::FP8 ? inv * sig_o[0] : inv, inv1 = C::FP8 ? inv * sig_o[1] : inv;  // fp8: V' x sigma_b
    const float lse2 = l > 0.f ? m_run[h] + log2f(l) : -INFINITY;
    const int64_t grow = (int64_t)t * p.H + head;
    const int c0 = grp * 256 + 2 * (lane & 3);
    if (p.S == 1) {
      if (staged) {
        uint8_t* row = stg + r * C::STG_BF + c0 * 2;
#pragma unroll
        for (int i = 0; i < 32; ++i)
          *reinterpret_cast<__nv_bfloat162*>(row + i * 16) =
              __floats2bfloat162_rn(o[4 * i + 2 * h] * (i < 16 ? inv0 : inv1), o[4 * i + 2 * h + 1] * (i < 16 ? inv0 : inv1));
      } else {
        __nv_bfloat16* dst = p.o + (int64_t)t * p.o_st + (int64_t)head * p.o_sh + c0;
#pragma unroll
        for (int i = 0; i < 32; ++i)
          *reinterpret_cast<__nv_bfloat162*>(dst + i * 8) =
              __floats2bfloat162_rn(o[4 * i + 2 * h] * (i < 16 ? inv0 : inv1), o[4 * i + 2 * h + 1] * (i < 16 ? inv0 : inv1));
      }
      if (p.lse && grp == 0 && (lane & 3) == 0) p.lse[grow] = lse2 * 0.6931471805599453f;
    } else {
      part_t* dst = part_ptr(p.ws_o) + ((int64_t)s * rows_total + grow) * D_V + c0;
#pragma unroll
      for (int i = 0; i < 32; ++i)
        part_put2(dst + i * 8, o[4 * i + 2 * h] * (i < 16 ? inv0 : inv1),
                  o[4 * i + 2 * h + 1] * (i < 16 ? inv0 : inv1));
      if (grp == 0 && (lane & 3) == 0) p.ws_lse[(int64_t)s * rows_total + grow] = lse2;
    }
  }
  if (staged) {  // CTA-uniform
    __syncthreads();  // the staged rows visible
    const int nrows = min(BM, p.H - h0);
    for (int c = tid; c < nrows * 64; c += C::THREADS) {  // 64 chunks of 16 B per row
      const int r = c >> 6, k = c & 63;
      const uint4 v = *reinterpret_cast<const uint4*>(stg + r * C::STG_BF + k * 16);
      *reinterpret_cast<uint4*>(p.o + (int64_t)t * p.o_st + (int64_t)(h0 + r) * p.o_sh + k * 8) = v;
    }
  }
  DSAV_SPLIT_STAMP(4, dsav_now());
}

}  // namespace dsav
