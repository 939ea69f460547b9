// The page-size-1 KV gather alone, as the dense ws kernel's producer runs it, against a TMA form (sm_90a; device
// diagnostic, not shipped). It measures L, the refill time of a stage, in the notes' "Session 37" model of the ASYM
// loop (tile period = (C + L) / 2 with two stages, C = a stage's hold by the consumers).
//
// One CTA per SM. A 2-stage ring of 64-token KV tiles (nine 8 KiB atoms of 64 rows x 128 B, 128B-swizzled: the
// kernel's layout). Producer: 128 threads. A consumer warp waits for each tile, holds the stage for HOLD SM cycles
// (spinning: the consumers' S + softmax + PV), then frees it. Tokens come from random slots of a 1.2 GB bf16 cache
// [2^20, 576] (row stride 1,152 B), the same slot list for each pair of CTAs (the kernel's two row tiles of one
// request read the same KV; SHARE=1 gives every CTA its own).
//   cp   : the shipped producer's gather: 8 lanes per token row, nine cp.async.cg of 16 B per lane and row, into the
//          swizzled atom rows; completion on the stage's mbarrier (cp.async.mbarrier.arrive.noinc, count 128).
//   cp256: cp with the .L2::256B prefetch hint on each copy (the L2 fetches a row's 256-byte pair of lines at once).
//   tma  : one warp issues nine 2D TMA loads per token (box 64 dims x 1 row, SWIZZLE_128B, into the row's 128 B of
//          each atom; the swizzle follows the smem address, so the layout is cp's), mbarrier expect_tx.
// Prints a line per mode, SHARE and hold: SM cycles per tile (the consumer's view: the period), the consumer's wait
// per tile, the aggregate rate (GB/s of tile bytes over the kernel's time, cudaEvent; min of 4 runs after a warm-up);
// then whether cp's, tma's and cp256's last tile of CTA 0 are byte-equal (tma: the swizzle claim; exit 1 if not).
// The model's L for a hold C is 2 x period - C where the period exceeds C.
// Build and run (no -lcuda: the driver entry point comes through the runtime):
//   nvcc -gencode=arch=compute_90a,code=sm_90a -O3 -std=c++17 -DMLAV_BUILD_CFG90=1 -I kernels/mla_verify/csrc \
//     -o /tmp/gather_rate tests/device/gather_rate.cu
//   /tmp/gather_rate
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "mla_verify_wgmma_ws.cuh"  // the kernel's tile layout, WsRows, copy_row8, mbarriers

using namespace mlav;
using namespace mlav::wg;

constexpr int kDims = 576;
constexpr int kSlotsLog2 = 20, kSlots = 1 << kSlotsLog2;
constexpr int kTilesPerCta = 64;  // B=8 L=32k: 64 tiles per CTA
constexpr int kProducers = 128, kThreads = kProducers + 32;
constexpr int kSmem = 2 * TILE + 1024 + 64;  // two stages, alignment slack, four mbarriers

#define CK(x)                                                                                \
  do {                                                                                       \
    cudaError_t e_ = (x);                                                                    \
    if (e_ != cudaSuccess) {                                                                 \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      std::exit(2);                                                                          \
    }                                                                                        \
  } while (0)

__device__ __forceinline__ void mbar_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void tma_row(uint32_t dst, const CUtensorMap* map, int x, int y, uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n" ::"r"(
          dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(x), "r"(y), "r"(bar)
      : "memory");
}

// copy_row8 (the kernel's row gather) with the .L2::256B prefetch hint: lane sub8's nine 16 B chunks of one row.
__device__ __forceinline__ void copy_row8_pf(uint32_t tile, uint32_t off, const __nv_bfloat16* src, int sub8) {
  const __nv_bfloat16* g = src + sub8 * 8;
#pragma unroll
  for (int it = 0; it < 9; ++it)
    asm volatile("cp.async.cg.shared.global.L2::256B [%0], [%1], 16;\n" ::"r"(tile + it * ATOM + off),
                 "l"(g + it * 64));
}

__global__ void fill(__nv_bfloat16* kv) {  // element (slot, dim) = (slot + 7 dim) % 251
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < (size_t)kSlots * kDims;
       i += (size_t)gridDim.x * blockDim.x)
    kv[i] = __float2bfloat16((float)((i / kDims + 7 * (i % kDims)) % 251));
}

// MODE 0: cp, 1: tma, 2: cp256. cyc[cta] = {consumer's cycles over all tiles, its summed wait}; dump = CTA 0's last
// tile.
template <int MODE>
__global__ void __launch_bounds__(kThreads, 1)
    gather(const __grid_constant__ CUtensorMap map, const __nv_bfloat16* kv, const int* slots, int share,
           long long hold, long long* cyc, unsigned char* dump) {
  extern __shared__ unsigned char raw[];
  const uint32_t r = static_cast<uint32_t>(__cvta_generic_to_shared(raw)), base = (r + 1023u) & ~1023u;
  const uint32_t bar0 = base + 2 * TILE;
  auto full = [&](int st) { return bar0 + 8u * st; };
  auto empty = [&](int st) { return bar0 + 16u + 8u * st; };
  const int tid = threadIdx.x;
  const int* my = slots + (size_t)(blockIdx.x / share) * kTilesPerCta * BN;
  if (tid == 0) {
    mbar_init(full(0), MODE != 1 ? kProducers : 1);
    mbar_init(full(1), MODE != 1 ? kProducers : 1);
    mbar_init(empty(0), 1);
    mbar_init(empty(1), 1);
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();
  if (tid < kProducers) {
    for (int t = 0; t < kTilesPerCta; ++t) {
      if (t >= 2) mbar_wait(empty(t & 1), ((t >> 1) + 1) & 1);
      const uint32_t st = base + (t & 1) * TILE;
      if constexpr (MODE != 1) {
        const WsRows rw(tid);  // as ws_issue_tile: rows l8 + 16 i, 8 lanes per row
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const __nv_bfloat16* src = kv + (size_t)my[t * BN + rw.l8 + 16 * i] * kDims;
          if constexpr (MODE == 0)
            copy_row8(st, rw.off0 + i * 16 * 128, src, rw.sub8, true);
          else
            copy_row8_pf(st, rw.off0 + i * 16 * 128, src, rw.sub8);
        }
        mbar_arrive_on_copies(full(t & 1));
      } else if (tid < 32) {
        if (tid == 0) mbar_expect_tx(full(t & 1), TILE);
        __syncwarp();
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int row = tid + 32 * h, y = my[t * BN + row];
#pragma unroll
          for (int a = 0; a < 9; ++a) tma_row(st + a * ATOM + row * 128, &map, a * 64, y, full(t & 1));
        }
      }
    }
    if constexpr (MODE != 1) asm volatile("cp.async.wait_all;\n" ::: "memory");
    return;
  }
  // consumer warp
  long long t0 = clock64(), waited = 0;
  for (int t = 0; t < kTilesPerCta; ++t) {
    const long long w0 = clock64();
    mbar_wait(full(t & 1), (t >> 1) & 1);
    const long long w1 = clock64();
    waited += w1 - w0;
    if (t == kTilesPerCta - 1 && blockIdx.x == 0) {  // the layout, for the cp / tma comparison
      const unsigned char* s = raw + (base - r) + (t & 1) * TILE;
      for (int i = tid - kProducers; i < TILE / 16; i += 32)
        reinterpret_cast<uint4*>(dump)[i] = reinterpret_cast<const uint4*>(s)[i];
    }
    while (clock64() - w1 < hold) {
    }
    __syncwarp();
    if (tid == kProducers) mbar_arrive(empty(t & 1));
  }
  if (tid == kProducers) {
    cyc[2 * blockIdx.x] = clock64() - t0;
    cyc[2 * blockIdx.x + 1] = waited;
  }
}

int main() {
  int sms = 0;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  __nv_bfloat16* kv = nullptr;
  CK(cudaMalloc(&kv, (size_t)kSlots * kDims * 2));
  fill<<<4096, 256>>>(kv);  // a pattern (slot, dim) -> value
  CK(cudaGetLastError());
  std::vector<int> hs((size_t)sms * kTilesPerCta * BN);
  std::mt19937 rng(1234);
  for (auto& v : hs) v = (int)(rng() & (kSlots - 1));
  int* slots = nullptr;
  CK(cudaMalloc(&slots, hs.size() * sizeof(int)));
  CK(cudaMemcpy(slots, hs.data(), hs.size() * sizeof(int), cudaMemcpyHostToDevice));
  long long* cyc = nullptr;
  unsigned char* dump = nullptr;
  CK(cudaMalloc(&cyc, sizeof(long long) * 2 * sms));
  CK(cudaMalloc(&dump, 3 * TILE));

  PFN_cuTensorMapEncodeTiled_v12000 encode = nullptr;
  cudaDriverEntryPointQueryResult q;
  CK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", reinterpret_cast<void**>(&encode), 12000,
                                     cudaEnableDefault, &q));
  if (!encode || q != cudaDriverEntryPointSuccess) {
    std::fprintf(stderr, "cuTensorMapEncodeTiled not found\n");
    return 2;
  }
  CUtensorMap map;
  const cuuint64_t gdim[2] = {(cuuint64_t)kDims, (cuuint64_t)kSlots};
  const cuuint64_t gstride[1] = {(cuuint64_t)kDims * 2};
  const cuuint32_t box[2] = {64, 1}, estride[2] = {1, 1};
  if (encode(&map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, kv, gdim, gstride, box, estride, CU_TENSOR_MAP_INTERLEAVE_NONE,
             CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_128B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) !=
      CUDA_SUCCESS) {
    std::fprintf(stderr, "cuTensorMapEncodeTiled failed\n");
    return 2;
  }
  CK(cudaFuncSetAttribute(gather<0>, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
  CK(cudaFuncSetAttribute(gather<1>, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
  CK(cudaFuncSetAttribute(gather<2>, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  std::vector<long long> hc(2 * sms);
  std::printf("%d SMs, %d tiles per CTA of %d B\n", sms, kTilesPerCta, TILE);
  const long long holds[] = {0, 2000, 3400};
  const char* names[] = {"cp", "tma", "cp256"};
  for (int mode : {0, 2, 1}) {  // every cp row first: a TMA fault (e.g. alignment) ends the context
    for (int share : {2, 1}) {
      for (long long hold : holds) {
        float best_ms = 1e30f;
        double per_tile = 0, wait_tile = 0;
        for (int rep = 0; rep < 5; ++rep) {
          CK(cudaEventRecord(e0));
          if (mode == 0)
            gather<0><<<sms, kThreads, kSmem>>>(map, kv, slots, share, hold, cyc, dump);
          else if (mode == 1)
            gather<1><<<sms, kThreads, kSmem>>>(map, kv, slots, share, hold, cyc, dump + TILE);
          else
            gather<2><<<sms, kThreads, kSmem>>>(map, kv, slots, share, hold, cyc, dump + 2 * TILE);
          CK(cudaEventRecord(e1));
          CK(cudaEventSynchronize(e1));
          CK(cudaGetLastError());
          float ms = 0;
          CK(cudaEventElapsedTime(&ms, e0, e1));
          if (rep == 0) continue;  // warm-up
          if (ms < best_ms) {
            best_ms = ms;
            CK(cudaMemcpy(hc.data(), cyc, sizeof(long long) * 2 * sms, cudaMemcpyDeviceToHost));
            double c = 0, w = 0;
            for (int i = 0; i < sms; ++i) c += hc[2 * i], w += hc[2 * i + 1];
            per_tile = c / sms / kTilesPerCta;
            wait_tile = w / sms / kTilesPerCta;
          }
        }
        const double gbs = (double)sms * kTilesPerCta * TILE / (best_ms * 1e-3) / 1e9;
        std::printf("%-5s share %d hold %5lld: %7.1f cycles/tile (wait %7.1f), %.4f ms, %.1f GB/s of tiles\n",
                    names[mode], share, hold, per_tile, wait_tile, best_ms, gbs);
        std::fflush(stdout);
      }
    }
  }
  std::vector<unsigned char> d(3 * TILE);
  CK(cudaMemcpy(d.data(), dump, 3 * TILE, cudaMemcpyDeviceToHost));
  const bool same = std::memcmp(d.data(), d.data() + TILE, TILE) == 0;
  const bool same256 = std::memcmp(d.data(), d.data() + 2 * TILE, TILE) == 0;
  std::printf("cp and tma last tile of CTA 0 byte-equal: %s\n", same ? "yes" : "NO");
  std::printf("cp and cp256 last tile of CTA 0 byte-equal: %s\n", same256 ? "yes" : "NO");
  return same && same256 ? 0 : 1;
}
