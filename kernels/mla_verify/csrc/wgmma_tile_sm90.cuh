// Tile-level pieces shared by the sm_90a verify kernels on wgmma (dense: mla_verify_wgmma.cuh,
// sparse: kernels/dsa_verify/csrc/dsa_verify_wgmma.cuh). Both run a CTA of two warpgroups over
// 64 query rows (BM) and 64-token KV tiles (BN), in shared memory as 128B-swizzled column atoms
// of 64 dims (atom = 64 rows x 128 B = 8 KiB; Q and a KV tile = nine atoms, 576 dims; P = one
// atom of bf16, K-major). Thread layout of the accumulators (wgmma m64nN): warp wq = warp % 4 of
// warpgroup grp holds rows r0 = 16 wq + lane / 4 and r0 + 8; S element 4i + e (i < 4) is column
// 32 grp + 8i + 2 (lane % 4) + (e & 1) of row r0 + 8 (e >> 1); O element 4i + e (i < 32) is
// output dim 256 grp + 8i + 2 (lane % 4) + (e & 1) of the same rows.
// Softmax in the log2 domain against a lazy reference max shared by both warpgroups: P is written
// at m_run while no row's max exceeds it by more than tau (P <= 2^tau); otherwise every thread
// takes the exact step (m_run from both warpgroups' maxima in smem, P rewritten, l and O rescaled).
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <math.h>
#include <stdint.h>

#include "wgmma_sm90.cuh"

namespace sm90wg {

constexpr int kTileRows = 64;    // BM = BN
constexpr int kAtomBytes = 8192;  // one 64-dim column atom of a 64-row tile

// desc + off for an address offset off (16-byte units) that cannot carry out of the descriptor's low word (its
// start address field, bits 0-13, plus at most a few thousand): the add on the low 32 bits only, the high word
// (stride offset, swizzle mode) kept as is, the same bits as the 64-bit add.
__device__ __forceinline__ uint64_t desc_add(uint64_t desc, uint32_t off) {
  uint64_t r;
  asm("mov.b64 %0, {%1, %2};" : "=l"(r) : "r"((uint32_t)desc + off), "r"((uint32_t)(desc >> 32)));
  return r;
}

// S[64 x 32] = Q K^T for warpgroup grp (tile tokens 32 grp .. 32 grp + 31) over dims [16 K0, 16 (K0 +
// NK)): NK x m64n32k16 (A = Q, B = K, both K-major; F16: f16 operands, else bf16). The first step
// overwrites sc (scale-d = 0) unless ACC (a later part of one chain). Issues only: the caller fences, commits
// and waits.
template <int K0, int NK, bool F16 = false, bool ACC = false>
__device__ __forceinline__ void issue_qk_steps(float* sc, uint32_t sQ, uint32_t sK, int grp) {
  const uint64_t dq = make_desc(sQ, 16, 1024), dk = make_desc(sK + grp * 4096, 16, 1024);
#pragma unroll
  for (int kk = K0; kk < K0 + NK; ++kk) {
    const uint64_t koff = ((kk >> 2) * kAtomBytes + (kk & 3) * 32) >> 4;  // start address field, 16 B units
    if constexpr (F16)
      wgmma_m64n32k16_ss_f16(sc, dq + koff, dk + koff, ACC || kk > K0);
    else
      wgmma_m64n32k16_ss(sc, dq + koff, dk + koff, ACC || kk > K0);
  }
}
// All 576 dims in bf16 (36 steps).
__device__ __forceinline__ void issue_qk(float* sc, uint32_t sQ, uint32_t sK, int grp) {
  issue_qk_steps<0, 576 / 16>(sc, sQ, sK, grp);
}

// S[64 x 64] = Q K^T over all 576 dims for one warpgroup (the whole tile: 36 x m64n64k16, both operands K-major,
// bf16), the full-rate shape (an m64n32k16 from smem is bound by its operand fetch at ~2/3 of the tensor peak).
// Element 4i + e (i < 8) is column 8i + 2 (lane % 4) + (e & 1) of row r0 + 8 (e >> 1): elements 16 h .. 16 h + 15
// are issue_qk's layout for grp = h. Issues only.
template <bool F16 = false>
__device__ __forceinline__ void issue_qk64(float* sc, uint32_t sQ, uint32_t sK) {
  const uint64_t dq = make_desc(sQ, 16, 1024), dk = make_desc(sK, 16, 1024);
#pragma unroll
  for (int kk = 0; kk < 576 / 16; ++kk) {
    const uint32_t koff = ((kk >> 2) * kAtomBytes + (kk & 3) * 32) >> 4;
    if constexpr (F16)
      wgmma_m64n64k16_ss_f16(sc, desc_add(dq, koff), desc_add(dk, koff), kk > 0);
    else
      wgmma_m64n64k16_ss(sc, desc_add(dq, koff), desc_add(dk, koff), kk > 0);
  }
}

// O[64 x 256] += P V for warpgroup grp (output dims 256 grp ..), k-steps [KS0, KS0 + NKS) of the tile's four (16
// tokens each): NKS x m64n256k16, A = P (K-major), B = dims 0..511 of the KV tile read N-major (V is the first 512
// dims of the row); F16: P and V in f16, else bf16. Issues only.
template <int KS0, int NKS, bool F16 = false>
__device__ __forceinline__ void issue_pv_steps(float* o, uint32_t sP, uint32_t sK, int grp) {
  const uint64_t dp = make_desc(sP, 16, 1024), dv = make_desc(sK + grp * 4 * kAtomBytes, kAtomBytes, 1024);
#pragma unroll
  for (int ks = KS0; ks < KS0 + NKS; ++ks) {
    if constexpr (F16)
      wgmma_m64n256k16_ss_tb_f16(o, dp + ((ks * 32) >> 4), dv + ((ks * 2048) >> 4), 1);
    else
      wgmma_m64n256k16_ss_tb(o, dp + ((ks * 32) >> 4), dv + ((ks * 2048) >> 4), 1);
  }
}
// All four k-steps (the whole tile).
template <bool F16 = false>
__device__ __forceinline__ void issue_pv(float* o, uint32_t sP, uint32_t sK, int grp) {
  issue_pv_steps<0, kTileRows / 16, F16>(o, sP, sK, grp);
}

// One row maximum of this thread (over its columns) reduced over the four lanes that hold the same row, i.e.
// over 32 columns of an m64nN accumulator.
__device__ __forceinline__ float reduce_row_max(float t) {
  t = fmaxf(t, __shfl_xor_sync(0xffffffffu, t, 1));
  return fmaxf(t, __shfl_xor_sync(0xffffffffu, t, 2));
}

// This thread's two row maxima (tmax, over its columns) reduced over the warpgroup's 32 columns and
// published to red_max[grp][row]; returns this thread's vote for the exact step (a row's max above
// m_run + tau; m_run = -inf: any finite max).
__device__ __forceinline__ bool publish_row_max(float (&tmax)[2], const float (&m_run)[2], float* red_max, int grp,
                                                int r0, int lane, float tau) {
  bool over = false;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    tmax[h] = reduce_row_max(tmax[h]);
    if ((lane & 3) == 0) red_max[grp * kTileRows + r0 + 8 * h] = tmax[h];
    over |= tmax[h] > m_run[h] + tau;
  }
  return over;
}

// P = exp2(sc - m_run) * vs as bf16 (F16: f16; P <= 2^tau fits) into the K-major swizzled P atom at
// pP; psum = its row sums (before vs: l stays in the units of the unscaled P).
template <bool F16 = false>
__device__ __forceinline__ void write_p(uint8_t* pP, const float (&sc)[16], const float (&m_run)[2],
                                        float (&psum)[2], int grp, int r0, int lane, float vs) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int r = r0 + 8 * h;
    const float m_use = (m_run[h] == -INFINITY) ? 0.f : m_run[h];
    psum[h] = 0.f;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float p0 = exp2f(sc[4 * i + 2 * h] - m_use), p1 = exp2f(sc[4 * i + 2 * h + 1] - m_use);
      psum[h] += p0 + p1;
      const int col = grp * 32 + i * 8 + 2 * (lane & 3);
      uint8_t* dst = pP + r * 128 + ((((col >> 3) ^ (r & 7))) << 4) + (col & 7) * 2;
      if constexpr (F16)
        *reinterpret_cast<__half2*>(dst) = __floats2half2_rn(p0 * vs, p1 * vs);
      else
        *reinterpret_cast<__nv_bfloat162*>(dst) = __floats2bfloat162_rn(p0 * vs, p1 * vs);
    }
  }
}

// The exact step's new reference for one row, from the tile's row maximum tile_max: m_run = max(m_run, tile_max);
// alpha = exp2(old m_run - new) (0 from -inf, never -inf - -inf).
__device__ __forceinline__ void exact_row_max(float& m_run, float& alpha, float tile_max) {
  const float m_new = fmaxf(m_run, tile_max);
  const float m_use = (m_new == -INFINITY) ? 0.f : m_new;
  alpha = exp2f(m_run - m_use);
  m_run = m_new;
}
// exact_row_max for this thread's two rows on both warpgroups' published maxima (red_max[0][row], red_max[1][row]).
__device__ __forceinline__ void exact_max(float (&m_run)[2], float (&alpha)[2], const float* red_max, int r0) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int r = r0 + 8 * h;
    exact_row_max(m_run[h], alpha[h], fmaxf(red_max[r], red_max[kTileRows + r]));
  }
}

// O rows times alpha (the exact step), skipped when no row of the warp moved.
__device__ __forceinline__ void rescale_o(float* o, const float (&alpha)[2]) {
  if (__any_sync(0xffffffffu, alpha[0] != 1.f || alpha[1] != 1.f)) {
#pragma unroll
    for (int i = 0; i < 32; ++i) {
      o[4 * i] *= alpha[0]; o[4 * i + 1] *= alpha[0];
      o[4 * i + 2] *= alpha[1]; o[4 * i + 3] *= alpha[1];
    }
  }
}

// End of the loop: this thread's row sums reduced over the warpgroup's columns, published to
// red_sum[grp][row] (the caller's barrier, then l = red_sum[0][r] + red_sum[1][r]).
__device__ __forceinline__ void publish_row_sums(float (&l_run)[2], float* red_sum, int grp, int r0, int lane) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    l_run[h] += __shfl_xor_sync(0xffffffffu, l_run[h], 1);
    l_run[h] += __shfl_xor_sync(0xffffffffu, l_run[h], 2);
    if ((lane & 3) == 0) red_sum[grp * kTileRows + r0 + 8 * h] = l_run[h];
  }
}

}  // namespace sm90wg
