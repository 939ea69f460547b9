// sm_90a cluster merge of a row tile's split partials through distributed shared memory (issue 13, the B=1
// intercept). Experimental: built only with -DMLAV_CLUSTER=C (C = 2, 4 or 8; mla_verify.cu), used by the
// warp-specialized bf16 kernel's token-split consumers (mla_verify_wgmma_ws.cuh, MODE 0).
// The split grid (m_tiles, S, B) is launched in clusters of (1, C, 1): the C CTAs of a cluster hold C consecutive
// splits of one row tile (rank = s % C). Instead of C fp32 partials through HBM, each CTA stages its normalized
// O [64 x 512] fp32 (128 KiB, over its two dead KV stages) and its rows' log2-sum-exp in its own shared memory; after
// one cluster barrier rank k reduces rows [64k/C, 64(k+1)/C) over the C CTAs' staging (ld.shared::cluster), then
// writes the cluster's merged partial (split index s / C) or, where the cluster holds every split, the bf16 output
// rows; a second cluster barrier keeps every CTA's shared memory alive until the last remote read. The combine
// kernel then merges ceil(S / C) partials instead of S (cluster_parts).
// Staging layout: row r at r * 2048 B, 32-byte granule g (8 floats) of the row at ((g ^ (r & 7)) << 5): the
// consumers' fragment stores (two floats per lane, 8 rows per warp) and the reducers' float4 loads (consecutive
// lanes, consecutive columns of one row) are both free of bank conflicts.
// Empty members (CTAs past the run's split count, or with no KV tile) take part with -inf row sums: every source
// of weight 0 is skipped, never multiplied, so their unwritten staging is never read.
#pragma once
#include "mla_verify_kernel.cuh"

namespace mlav {
namespace wg {

constexpr int CL_ROW_BYTES = 512 * 4;  // staging row: 512 fp32

__device__ __forceinline__ uint32_t cluster_rank() {
  uint32_t r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
  return r;
}
// This CTA's shared address `a` as the address of the same offset in cluster rank `rank`'s shared memory.
__device__ __forceinline__ uint32_t map_rank(uint32_t a, uint32_t rank) {
  uint32_t r;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(r) : "r"(a), "r"(rank));
  return r;
}
__device__ __forceinline__ float ld_cluster_f32(uint32_t a) {
  float v;
  asm volatile("ld.shared::cluster.f32 %0, [%1];\n" : "=f"(v) : "r"(a) : "memory");
  return v;
}
__device__ __forceinline__ float4 ld_cluster_v4(uint32_t a) {
  float4 v;
  asm volatile("ld.shared::cluster.v4.f32 {%0, %1, %2, %3}, [%4];\n"
               : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
               : "r"(a)
               : "memory");
  return v;
}
// Every thread of every CTA of the cluster (release / acquire: the shared writes before it are visible to the
// cluster's reads after it).
__device__ __forceinline__ void cluster_sync() {
  __syncwarp();  // .aligned: the warp converged (cluster_reduce's row tests may diverge inside a warp)
  asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::: "memory");
}

__device__ __forceinline__ uint32_t stage_off(int r, int col) {  // col: a multiple of 2
  return (uint32_t)(r * CL_ROW_BYTES + ((((col >> 3) ^ (r & 7)) & 63) << 5) + (col & 7) * 4);
}

// Consumer thread's rows r0 and r0 + 8 into the staging (O of warpgroup grp over the two warpgroups' row sum, as
// write_rows' partial) and their log2-sum-exp into lse_s [BM] (-inf: empty or padded row). After the consumer barrier
// that follows publish_row_sums (every PV read of the KV stages done).
__device__ __forceinline__ void stage_rows(uint8_t* stage, float* lse_s, const Work& w, const float* o,
                                           const float (&m_run)[2], const float* red_sum, int grp, int r0, int lane) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int r = r0 + 8 * h;
    const bool live = w.row0 + r < w.R;
    const float l = red_sum[r] + red_sum[BM + r];
    const float inv = l > 0.f ? 1.f / l : 0.f;
    if (live) {
#pragma unroll
      for (int i = 0; i < 32; ++i) {
        const int col = grp * 256 + i * 8 + 2 * (lane & 3);
        *reinterpret_cast<float2*>(stage + stage_off(r, col)) =
            make_float2(o[4 * i + 2 * h] * inv, o[4 * i + 2 * h + 1] * inv);
      }
    }
    if (grp == 0 && (lane & 3) == 0) lse_s[r] = live && l > 0.f ? m_run[h] + log2f(l) : -INFINITY;
  }
}

// An empty member's rows: -inf everywhere (its staging stays unwritten and is never read).
__device__ __forceinline__ void stage_empty(float* lse_s, int tid, int nthreads) {
  for (int r = tid; r < BM; r += nthreads) lse_s[r] = -INFINITY;
}

// Rank `rank`'s rows of the cluster's merge, by consumer thread t (< 256): C sources in rank order, weights
// 2^(lse_c - max) / sum (sources of weight 0 skipped). parts = ceil(S / C) partials in this run: 1 writes the bf16
// output rows, else split index s0 / C of the workspace. row_base = the row tile's first packed row (blockIdx.x BM).
template <int C>
__device__ __forceinline__ void cluster_reduce(const Params& p, const Work& w, int row_base, int s0, int parts,
                                               uint32_t stage_a, uint32_t lse_a, uint32_t rank, int t) {
  constexpr int RPC = BM / C;       // rows per rank
  constexpr int TPR = 256 / RPC;    // threads per row
  constexpr int N4 = 512 / 4 / TPR; // float4 per thread: columns 4 (i TPR + sub), i < N4
  static_assert(RPC * TPR == 256 && N4 * 4 * TPR == 512, "cluster size divides the tile");
  const int r = (int)rank * RPC + t / TPR, sub = t % TPR;
  const int gr = row_base + r;
  if (gr >= w.R) return;
  float lse[C], mx = -INFINITY;
#pragma unroll
  for (int c = 0; c < C; ++c) {
    lse[c] = ld_cluster_f32(map_rank(lse_a + 4u * r, c));
    mx = fmaxf(mx, lse[c]);
  }
  float wt[C], total = 0.f;
#pragma unroll
  for (int c = 0; c < C; ++c) {
    wt[c] = lse[c] == -INFINITY ? 0.f : exp2f(__fadd_rn(lse[c], -mx));
    total = __fadd_rn(total, wt[c]);
  }
  float4 acc[N4];
#pragma unroll
  for (int i = 0; i < N4; ++i) acc[i] = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
  for (int c = 0; c < C; ++c) {
    if (wt[c] == 0.f) continue;  // uniform over the row's threads
    const uint32_t src = map_rank(stage_a, c);
#pragma unroll
    for (int i = 0; i < N4; ++i) {
      const float4 v = ld_cluster_v4(src + stage_off(r, 4 * (i * TPR + sub)));
      acc[i].x = __fadd_rn(acc[i].x, __fmul_rn(wt[c], v.x));
      acc[i].y = __fadd_rn(acc[i].y, __fmul_rn(wt[c], v.y));
      acc[i].z = __fadd_rn(acc[i].z, __fmul_rn(wt[c], v.z));
      acc[i].w = __fadd_rn(acc[i].w, __fmul_rn(wt[c], v.w));
    }
  }
  const float inv = total > 0.f ? __frcp_rn(total) : 0.f;
  const int64_t tok = w.qo0 + gr / p.H;
  if (parts == 1) {
    __nv_bfloat16* dst = p.o + tok * p.o_st + (int64_t)(gr % p.H) * p.o_sh;
#pragma unroll
    for (int i = 0; i < N4; ++i) {
      const __nv_bfloat162 lo = __floats2bfloat162_rn(__fmul_rn(acc[i].x, inv), __fmul_rn(acc[i].y, inv));
      const __nv_bfloat162 hi = __floats2bfloat162_rn(__fmul_rn(acc[i].z, inv), __fmul_rn(acc[i].w, inv));
      uint2 pk;
      pk.x = *reinterpret_cast<const uint32_t*>(&lo);
      pk.y = *reinterpret_cast<const uint32_t*>(&hi);
      *reinterpret_cast<uint2*>(dst + 4 * (i * TPR + sub)) = pk;
    }
    return;
  }
  const int64_t grow = w.qo0 * p.H + gr, sc = s0 / C;
  float4* dst = reinterpret_cast<float4*>(p.ws_o + (sc * p.T * p.H + grow) * D_V);
#pragma unroll
  for (int i = 0; i < N4; ++i)
    dst[i * TPR + sub] = make_float4(__fmul_rn(acc[i].x, inv), __fmul_rn(acc[i].y, inv), __fmul_rn(acc[i].z, inv),
                                     __fmul_rn(acc[i].w, inv));
  if (sub == 0) p.ws_lse[sc * p.T * p.H + grow] = total > 0.f ? mx + log2f(total) : -INFINITY;
}

}  // namespace wg
}  // namespace mlav
