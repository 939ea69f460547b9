// Throughput of the wgmma chains the dense sm90wg kernel's S and PV phases issue, without loads or softmax
// (sm_90a; device diagnostic, not shipped). One CTA of two warpgroups per SM (132 CTAs), operands in 128B-swizzled
// smem as the kernel holds them (Q and a KV tile: nine 8 KiB atoms of 64 rows each; P one atom). Each variant runs
// kIters iterations of fence / issue / commit / wait; prints SM cycles per iteration (thread 0 of each CTA, mean
// over CTAs) and FLOP per SM cycle (per 64-token tile of the kernel: S 4.72 MFLOP, PV 4.19 MFLOP; 4,096 peak).
//   s32x2     : the kernel's S, each warpgroup 36 x m64n32k16 (its 32 tokens), same A (Q) in both
//   s32x2_aq  : as s32x2 but warpgroup 1's A from a second copy of Q (do equal A addresses share a fetch?)
//   s64x2_k   : split-K S, each warpgroup 18 x m64n64k16 over its half of the dims (session 19 call 4)
//   s64x1     : one warpgroup 36 x m64n64k16 (a whole tile's S by one warpgroup, the seesaw's S), alone on the SM
//   s64x2_t   : each warpgroup 36 x m64n64k16 on its own tile (two tiles' S at once: the seesaw's steady state)
//   s32x1     : one warpgroup's half of s32x2 alone on the SM (is a warpgroup's n32 chain latency bound?)
//   pv        : the kernel's PV, each warpgroup 4 x m64n256k16 (B N-major)
// Session 20 (one tile's MMA work of the shipped design against the seesaw's, with and without the next tile's
// 72 KiB of cp.async writes into smem, source L2-resident so the loads themselves are short):
//   ld        : the loads alone (256 threads x 18 cp.async of 16 B per tile, waited at the iteration's end)
//   cur       : s32x2 then pv: the shipped kernel's MMA work per tile
//   cur_ld    : cur with the next tile's loads in flight (into KV tile 1, which cur does not read)
//   seesaw    : per warpgroup 36 x m64n64k16 on its own tile, then 8 x m64n256k16 over both tiles' V for its
//               256 output columns (P from smem; the seesaw would take its own P from registers): two tiles
//   seesaw_ld : seesaw with two tiles' loads in flight (written over the tiles read: timing only)
// Build and run: nvcc -gencode=arch=compute_90a,code=sm_90a -O3 -std=c++17 -I kernels/mla_verify/csrc -o /tmp/wgmma_rate
//   tests/device/wgmma_rate.cu && /tmp/wgmma_rate
#include <cstdio>
#include <cuda_runtime.h>

#include "wgmma_sm90.cuh"

using namespace sm90wg;

constexpr int kSrcTiles = 56;  // global source of the load variants: 56 tiles (4 MiB, L2-resident)

__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(src) : "memory");
}
// One 72 KiB tile from src into smem at dst: 18 x 16 B per thread of 256.
__device__ __forceinline__ void load_tile(uint32_t dst, const unsigned char* src) {
#pragma unroll 3  // fully unrolled, seesaw_ld's 36 hoisted addresses spilled
  for (int i = 0; i < 18; ++i) {
    const int off = (i * 256 + (int)threadIdx.x) * 16;
    cp_async16(dst + off, src + off);
  }
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}

constexpr int kIters = 256;
constexpr int kAtom = 8192, kTile = 9 * kAtom;
// smem: Q, KV tile 0, KV tile 1 (the second A copy of s32x2_aq, the second tile of s64x2_t), P; 225 KiB.
constexpr int kOffQ = 0, kOffK0 = kTile, kOffK1 = 2 * kTile, kOffP = 3 * kTile, kSmem = 3 * kTile + kAtom + 1024;

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

template <int V>
__global__ void __launch_bounds__(256, 1) chain(long long* cyc, float* sink, const unsigned char* src) {
  extern __shared__ __align__(1024) unsigned char raw[];
  const uint32_t r = smem_addr(raw), base = (r + 1023u) & ~1023u;
  unsigned char* smem = raw + (base - r);
  // Small finite bf16 values everywhere (0x3c00 = 2^-7): sums stay finite over every chain.
  for (int i = threadIdx.x; i < (kSmem - 1024) / 4; i += blockDim.x) reinterpret_cast<uint32_t*>(smem)[i] = 0x3c003c00u;
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
  __syncthreads();
  const int grp = threadIdx.x >> 7;
  const uint32_t sQ = base + kOffQ, sK0 = base + kOffK0, sK1 = base + kOffK1, sP = base + kOffP;
  float acc[128], sacc[32];
#pragma unroll
  for (int i = 0; i < 128; ++i) acc[i] = 0.f;
#pragma unroll
  for (int i = 0; i < 32; ++i) sacc[i] = 0.f;
  const uint64_t dq = make_desc(sQ, 16, 1024);
  auto s32 = [&]() {  // 36 x m64n32k16: all 64 rows x tokens [32 grp, 32 grp + 32) of KV tile 0
    const uint64_t dk = make_desc(sK0 + grp * 4096, 16, 1024);
#pragma unroll
    for (int kk = 0; kk < 36; ++kk) {
      const uint64_t o = ((kk >> 2) * kAtom + (kk & 3) * 32) >> 4;
      wgmma_m64n32k16_ss(sacc, dq + o, dk + o, 1);
    }
  };
  auto pv = [&](uint32_t sV) {  // 4 x m64n256k16: A = P, B = dims 256 grp .. of the tile at sV (N-major)
    const uint64_t dp = make_desc(sP, 16, 1024), dv = make_desc(sV + grp * 4 * kAtom, kAtom, 1024);
#pragma unroll
    for (int ks = 0; ks < 4; ++ks) wgmma_m64n256k16_ss_tb(acc, dp + ((ks * 32) >> 4), dv + ((ks * 2048) >> 4), 1);
  };
  long long t0 = clock64();
  for (int it = 0; it < kIters; ++it) {
    const unsigned char* g = src + (size_t)((blockIdx.x + it) % kSrcTiles) * kTile;
    if constexpr (V == 7 || V == 9) load_tile(sK1, g);
    if constexpr (V == 11) {
      load_tile(sK0, g);
      load_tile(sK1, src + (size_t)((blockIdx.x + it + 1) % kSrcTiles) * kTile);
    }
    wgmma_fence();
    if constexpr (V == 8 || V == 9) {  // cur / cur_ld: S then PV of one tile, as the shipped kernel issues them
      s32();
      wgmma_commit();
      wgmma_wait0();
      fence_regs<32>(sacc);
      wgmma_fence();
      pv(sK0);
    } else if constexpr (V == 10 || V == 11) {  // seesaw / seesaw_ld: own tile's S, then PV over both tiles
      const uint64_t dk = make_desc(grp ? sK1 : sK0, 16, 1024);
#pragma unroll
      for (int kk = 0; kk < 36; ++kk) {
        const uint64_t o = ((kk >> 2) * kAtom + (kk & 3) * 32) >> 4;
        wgmma_m64n64k16_ss(sacc, dq + o, dk + o, 1);
      }
      wgmma_commit();
      wgmma_wait0();
      fence_regs<32>(sacc);
      wgmma_fence();
      pv(sK0);
      pv(sK1);
    } else if constexpr (V == 7) {  // ld: no wgmma
    } else
    if constexpr (V == 0 || V == 1 || V == 6) {  // s32x2 / s32x2_aq / s32x1: 36 x m64n32k16, tokens 32 grp..
      const uint32_t aq = (V == 1 && grp) ? sK1 : sQ;
      const uint64_t dq = make_desc(aq, 16, 1024), dk = make_desc(sK0 + grp * 4096, 16, 1024);
#pragma unroll
      for (int kk = 0; kk < 36; ++kk) {
        const uint64_t o = ((kk >> 2) * kAtom + (kk & 3) * 32) >> 4;
        wgmma_m64n32k16_ss(acc, dq + o, dk + o, 1);
      }
    } else if constexpr (V == 2) {  // s64x2_k: 18 x m64n64k16 over dims [288 grp, 288 grp + 288)
      const uint64_t dq = make_desc(sQ, 16, 1024), dk = make_desc(sK0, 16, 1024);
#pragma unroll
      for (int i = 0; i < 18; ++i) {
        const int kk = grp * 18 + i;
        const uint64_t o = ((kk >> 2) * kAtom + (kk & 3) * 32) >> 4;
        wgmma_m64n64k16_ss(acc, dq + o, dk + o, 1);
      }
    } else if constexpr (V == 3 || V == 4) {  // s64x1 (launched with one warpgroup) / s64x2_t (each its own tile)
      const uint64_t dq = make_desc(sQ, 16, 1024), dk = make_desc(grp ? sK1 : sK0, 16, 1024);
#pragma unroll
      for (int kk = 0; kk < 36; ++kk) {
        const uint64_t o = ((kk >> 2) * kAtom + (kk & 3) * 32) >> 4;
        wgmma_m64n64k16_ss(acc, dq + o, dk + o, 1);
      }
    } else {  // pv: 4 x m64n256k16, A = P, B = dims 256 grp .. of KV tile 0 (N-major)
      const uint64_t dp = make_desc(sP, 16, 1024), dv = make_desc(sK0 + grp * 4 * kAtom, kAtom, 1024);
#pragma unroll
      for (int ks = 0; ks < 4; ++ks) wgmma_m64n256k16_ss_tb(acc, dp + ((ks * 32) >> 4), dv + ((ks * 2048) >> 4), 1);
    }
    wgmma_commit();
    wgmma_wait0();
    fence_regs<128>(acc);
    if constexpr (V == 7 || V == 9 || V == 11) asm volatile("cp.async.wait_all;\n" ::: "memory");
  }
  __syncthreads();
  const long long t1 = clock64();
  float s = 0.f;
#pragma unroll
  for (int i = 0; i < 128; ++i) s += acc[i];
#pragma unroll
  for (int i = 0; i < 32; ++i) s += sacc[i];
  if (s == 12345.f) sink[threadIdx.x] = s;  // keeps the chains live
  if (threadIdx.x == 0) cyc[blockIdx.x] = t1 - t0;
}

template <int V>
static void run(const char* name, double flop_per_iter, int sms, long long* d_cyc, float* d_sink, const unsigned char* d_src) {
  cudaFuncSetAttribute(chain<V>, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem);
  const int threads = (V == 3 || V == 6) ? 128 : 256;  // s64x1: one warpgroup (a branch around its wgmmas would serialize them)
  chain<V><<<sms, threads, kSmem>>>(d_cyc, d_sink, d_src);  // warm-up
  chain<V><<<sms, threads, kSmem>>>(d_cyc, d_sink, d_src);
  cudaError_t e = cudaDeviceSynchronize();
  if (e != cudaSuccess) {
    printf("%s: %s\n", name, cudaGetErrorString(e));
    return;
  }
  long long h[1024];
  cudaMemcpy(h, d_cyc, sms * sizeof(long long), cudaMemcpyDeviceToHost);
  double m = 0;
  for (int i = 0; i < sms; ++i) m += (double)h[i];
  m /= sms * (double)kIters;
  printf("{\"variant\": \"%s\", \"cycles_per_iter\": %.1f, \"flop_per_iter\": %.0f, \"flop_per_cycle\": %.1f}\n", name, m,
         flop_per_iter, flop_per_iter / m);
}

int main() {
  int sms = 0;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  long long* d_cyc;
  float* d_sink;
  cudaMalloc(&d_cyc, sms * sizeof(long long));
  cudaMalloc(&d_sink, 256 * sizeof(float));
  unsigned char* d_src;  // the load variants' source: kSrcTiles tiles of the same finite bf16 pattern as smem
  cudaMalloc(&d_src, (size_t)kSrcTiles * kTile);
  cudaMemset(d_src, 0x3c, (size_t)kSrcTiles * kTile);  // bf16 0x3c3c: 0.0115, finite
  const double s_tile = 2.0 * 64 * 64 * 576, pv_tile = 2.0 * 64 * 64 * 512;
  run<0>("s32x2", s_tile, sms, d_cyc, d_sink, d_src);
  run<1>("s32x2_aq", s_tile, sms, d_cyc, d_sink, d_src);
  run<2>("s64x2_k", s_tile, sms, d_cyc, d_sink, d_src);
  run<3>("s64x1", s_tile, sms, d_cyc, d_sink, d_src);
  run<4>("s64x2_t", 2 * s_tile, sms, d_cyc, d_sink, d_src);
  run<5>("pv", pv_tile, sms, d_cyc, d_sink, d_src);
  run<6>("s32x1", s_tile / 2, sms, d_cyc, d_sink, d_src);
  run<7>("ld", 0, sms, d_cyc, d_sink, d_src);
  run<8>("cur", s_tile + pv_tile, sms, d_cyc, d_sink, d_src);
  run<9>("cur_ld", s_tile + pv_tile, sms, d_cyc, d_sink, d_src);
  run<10>("seesaw", 2 * (s_tile + pv_tile), sms, d_cyc, d_sink, d_src);
  run<11>("seesaw_ld", 2 * (s_tile + pv_tile), sms, d_cyc, d_sink, d_src);
  return 0;
}
