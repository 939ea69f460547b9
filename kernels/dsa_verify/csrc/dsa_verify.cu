// Launchers of the DSA verify kernels: one translation unit, a few template instantiations.
// cfg 0 "m16": BM 16 heads, BN 32 positions, 2 stages, 128 threads (bf16 94,208 B / fp8 100,112 B smem)
// cfg 1 "m32": BM 32, BN 16, 3 stages, 128 threads (bf16 94,208 B / fp8 89,616 B)
// cfg 2 "m64": BM 64, BN 32, 3 stages, 256 threads (bf16 190,464 B / fp8 181,264 B), sm_90a only
// cfg 3 "m16d": BM 16, BN 32, 4 stages, 128 threads (bf16 168,192 B / fp8 142,352 B), sm_90a only:
//   the small-T latency config (a 128-position split has its whole KV in flight at once)
// cfg 4 "m16w": BM 16, BN 64, 2 stages, 256 threads (8 warps: 8 S column groups, 8 PV groups of 64
//   dims), sm_90a only: the B=1 latency config (twice the warps on one 64-position tile).
// cfg 5 "n8": 8 heads per CTA in the mma N (dsa_verify_n8.cuh), 4 independent warps of 16 positions
//   (BN 64), 2 stages per warp, 128 threads (bf16 156,704 B / fp8 168,096 B), sm_90a only
// cfg 7 "n8w": n8 with 7 warps (BN 112) and 1 raw stage per warp, 224 threads (bf16 138,268 B / fp8
//   213,664 B), sm_90a only: for fp8 the raw stage is free after the conversion, so every warp still has
//   its next tile in flight while it computes, with 7 warps per SM instead of 4 to hide latency
// cfg 8 "n8r": fp8 only, 8 warps (BN 128) x 2 raw stages, 256 threads (186,048 B), sm_90a only: the
//   e4m3 bytes go from the raw ring straight into the mma fragments (CfgN REG), no f16 tile
// cfg 6 "n8s": n8 with 2 warps (BN 32), 64 threads (bf16 82,960 B / fp8 88,720 B): the sm_120a one
// cfg 12 "n8rw": fp8 only, n8r's path with 7 warps (BN 112) x 1 raw stage, 224 threads (91,552 B):
//   one CTA of 7 warps per 100 KB sm_120 SM, the sm_120a fp8 config (every arch); its end-of-kernel
//   merge runs in rounds (CfgN::MERGE_ROUNDS: one raw stage cannot hold every warp's O^T)
// cfg 13 "w64": BM 64 heads on warpgroup MMA (wgmma), BN 64 positions, 2 stages, 256 threads
//   (231,936 B; fp8: f16 tiles of the rows scaled per block by 1 / sigma_b), sm_90a only
//   (dsa_verify_wgmma.cuh; the dense wgmma kernel's schedule): the sm_90a auto for H > 16, either
//   cache
// m16 / m16d / m16w can run as thread-block clusters of S splits with the combine fused (p.cluster).
// Otherwise S > 1 splits merge in a combine kernel: the sliced one (16 warps of 32 dims per (row,
// head)) or, with p.combine_wide, the wide one (one warp per (row, head)); the host picks.
// The byte counts are Cfg<>::bytes; kernels/dsa_verify/tiles.py mirrors them.
// DSAV_BUILD_CFG90=0 leaves the sm_90a-only configs out (sm_120a builds: 99 KiB of smem per block,
// no wgmma).
#ifndef DSAV_BUILD_CFG90
#define DSAV_BUILD_CFG90 1
#endif
#include "dsa_verify_kernel.cuh"
#include "dsa_verify_n8.cuh"
#if DSAV_BUILD_CFG90
#include "dsa_verify_wgmma.cuh"
#endif
#include "dsa_verify_launch.h"
#include "../../mla_verify/csrc/pdl_launch.h"
// DSAV_EXPERIMENTAL=1 (the experimental JIT build only, never phase 0's build or the prebuilt
// library) adds cfg 11 "n8rs": n8r's path with 2 warps (60,048 B; one CTA, so 2 warps, per sm_120
// SM: slower than n8rw there), cfg 14 "n8x" (bf16 only: n8's S phase with the PV split by dims
// across the 4 warps, one barrier per tile, no end merge of O^T; 163,232 B; dsa_verify_n8.cuh CfgX),
// cfg 15 "n8x8" (n8x with 8 warps of 16 positions, BN 128, one stage: a second barrier per tile
// frees it; 169,760 B), cfg 16 "n8xr" (fp8 only: n8x with n8r's in-register e4m3 path, a warp's dims
// in one scale block; 108,704 B), cfg 17 "n8xrs" (n8xr with one stage, 66,704 B: sm_120-sized) and
// the sm_120 occupancy emulation (set_sm120_occupancy) that measures sm_120a's configs on Hopper. (cfg 9 "n8p" and 10 "n8p14", two warps per tile split by
// 128-dim blocks, were measured slower than n8r on the H200 and removed: dsa-verify-notes.md,
// session 8; w64's experimental variants were measured and removed or shipped: session 13-15 notes.)
#ifndef DSAV_EXPERIMENTAL
#define DSAV_EXPERIMENTAL 0
#endif
#define DSAV_EXP90 (DSAV_BUILD_CFG90 && DSAV_EXPERIMENTAL)

namespace dsav {

using M16B = Cfg<16, 32, 2, false>;
using M16F = Cfg<16, 32, 2, true>;
using M32B = Cfg<32, 16, 3, false>;
using M32F = Cfg<32, 16, 3, true>;
using N8SB = CfgN<2, 2, false>;
using N8SF = CfgN<2, 2, true>;
using N8RWF = CfgN<7, 1, true, true>;
#if DSAV_BUILD_CFG90
using M64B = Cfg<64, 32, 3, false>;
using M64F = Cfg<64, 32, 3, true>;
using M16DB = Cfg<16, 32, 4, false>;
using M16DF = Cfg<16, 32, 4, true>;
using M16WB = Cfg<16, 64, 2, false, 8>;
using M16WF = Cfg<16, 64, 2, true, 8>;
using N8B = CfgN<4, 2, false>;
using N8F = CfgN<4, 2, true>;
using N8WB = CfgN<7, 1, false>;
using N8WF = CfgN<7, 1, true>;
using N8RF = CfgN<8, 2, true, true>;
using W64B = CfgW<false>;
using W64F = CfgW<true>;
#endif
#if DSAV_EXP90
using N8RSF = CfgN<2, 2, true, true>;
using N8XB = CfgX<4, 2>;
using N8X8B = CfgX<8, 1>;
using N8XRF = CfgX<4, 2, true>;
using N8XRSF = CfgX<4, 1, true>;
#endif

#if DSAV_EXPERIMENTAL
// the emulated SM's shared memory and its reservation per block (bytes; 0: emulation off), as
// kernels/dsa_verify/tiles.py gives them (SM120_SMEM_PER_SM, SM120_RESERVED_PER_BLOCK)
static int g_emul_smem_per_sm = 0, g_emul_reserved = 0;
#endif

bool set_sm120_occupancy(int smem_per_sm, int reserved_per_block) {
#if DSAV_EXPERIMENTAL
  g_emul_smem_per_sm = smem_per_sm > 0 ? smem_per_sm : 0;
  g_emul_reserved = reserved_per_block > 0 ? reserved_per_block : 0;
  return true;
#else
  (void)smem_per_sm;
  (void)reserved_per_block;
  return false;  // the emulation is a diagnostic of the experimental build only
#endif
}

// The dynamic shared memory a config's kernel is launched with: C::bytes, or, with the sm_120
// occupancy emulation on, C::bytes padded so that this device's SM holds exactly as many CTAs as an
// sm_120 SM would hold of the unpadded kernel (a config sm_120 cannot hold at all stays unpadded).
template <typename C>
static int launch_bytes() {
#if DSAV_EXPERIMENTAL
  const int n120 = g_emul_smem_per_sm / (C::bytes + g_emul_reserved);
  if (n120 >= 1) {
    int dev = 0, per_sm = 0, optin = 0, reserved = 0;
    if (cudaGetDevice(&dev) == cudaSuccess &&
        cudaDeviceGetAttribute(&per_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, dev) == cudaSuccess &&
        cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) == cudaSuccess &&
        cudaDeviceGetAttribute(&reserved, cudaDevAttrReservedSharedMemoryPerBlock, dev) == cudaSuccess) {
      const int padded = per_sm / n120 - reserved;
      return padded > C::bytes ? (padded < optin ? padded : optin) : C::bytes;
    }
    (void)cudaGetLastError();
  }
#endif
  return C::bytes;
}

// the split kernel of a config: heads in the mma M (Cfg), in N (CfgN), or on wgmma (CfgW)
using SplitFn = void (*)(const Params);
template <typename C>
constexpr SplitFn split_fn() {
#if DSAV_BUILD_CFG90
  if constexpr (IsWgmma<C>::value) return dsa_verify_wgmma_kernel<C>;
  else
#endif
  if constexpr (C::N8)
    return dsa_verify_n8_kernel<C>;
  else
    return dsa_verify_split_kernel<C>;
}

template <typename C>
static cudaError_t launch_split(const Params& p, cudaStream_t stream) {
  static int attr_device = -1, attr_bytes = 0;  // >48 KiB dynamic smem opt-in, once per device and size
  int dev = 0;
  cudaError_t e = cudaGetDevice(&dev);
  if (e != cudaSuccess) return e;
  const int bytes = launch_bytes<C>();
  if (attr_device != dev || attr_bytes != bytes) {
    e = cudaFuncSetAttribute(split_fn<C>(), cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
    if (e != cudaSuccess) return e;
    attr_device = dev;
    attr_bytes = bytes;
  }
  const dim3 grid((unsigned)p.T, (unsigned)p.S, (unsigned)((p.H + C::BM - 1) / C::BM));
  if (!p.cluster) {
    split_fn<C>()<<<grid, C::THREADS, bytes, stream>>>(p);
    return cudaGetLastError();
  }
  if (!C::CLUSTER_OK || p.cluster != p.S || p.cluster > C::MAX_CLUSTER || (D_V % (4 * p.cluster)) != 0)
    return cudaErrorInvalidValue;
  static int nonportable_device = -1;  // cluster sizes above 8 need the non-portable opt-in
  if (p.cluster > 8 && nonportable_device != dev) {
    e = cudaFuncSetAttribute(split_fn<C>(), cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
    if (e != cudaSuccess) return e;
    nonportable_device = dev;
  }
  cudaLaunchConfig_t lc = {};
  lc.gridDim = grid;
  lc.blockDim = dim3(C::THREADS);
  lc.dynamicSmemBytes = bytes;
  lc.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = 1;
  attr[0].val.clusterDim.y = (unsigned)p.cluster;
  attr[0].val.clusterDim.z = 1;
  lc.attrs = attr;
  lc.numAttrs = 1;
  return cudaLaunchKernelEx(&lc, split_fn<C>(), p);
}

// Clusters of `size` CTAs that can be resident at once (0: this size cannot launch).
template <typename C>
static int max_clusters(int size) {
  if (!C::CLUSTER_OK || size < 1 || size > C::MAX_CLUSTER) return 0;
  int dev = 0, n = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) return 0;
  if (cudaFuncSetAttribute(split_fn<C>(), cudaFuncAttributeMaxDynamicSharedMemorySize, C::bytes) !=
      cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  if (size > 8 &&
      cudaFuncSetAttribute(split_fn<C>(), cudaFuncAttributeNonPortableClusterSizeAllowed, 1) !=
          cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  cudaLaunchConfig_t lc = {};
  lc.gridDim = dim3(1, (unsigned)size, 1);
  lc.blockDim = dim3(C::THREADS);
  lc.dynamicSmemBytes = C::bytes;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = 1;
  attr[0].val.clusterDim.y = (unsigned)size;
  attr[0].val.clusterDim.z = 1;
  lc.attrs = attr;
  lc.numAttrs = 1;
  if (cudaOccupancyMaxActiveClusters(&n, split_fn<C>(), &lc) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return n;
}

template <typename C>
static int occupancy() {
  int dev = 0, n = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) return 0;
  const int bytes = launch_bytes<C>();
  if (cudaFuncSetAttribute(split_fn<C>(), cudaFuncAttributeMaxDynamicSharedMemorySize, bytes) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, split_fn<C>(), C::THREADS, bytes) !=
      cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return n;
}

long long combine_blocks(long long rows, bool wide) {
  return wide ? (rows + COMBINE_WIDE_WARPS - 1) / COMBINE_WIDE_WARPS
              : (rows * COMBINE_SLICES + COMBINE_WARPS - 1) / COMBINE_WARPS;
}

static cudaError_t launch_combine(const Params& p, cudaStream_t stream) {
  const unsigned blocks = (unsigned)combine_blocks((long long)p.T * p.H, false);
  return launch_pdl(dsa_verify_combine_kernel, blocks, COMBINE_WARPS * 32, p, stream);
}

static cudaError_t launch_combine_wide(const Params& p, cudaStream_t stream) {
  const unsigned blocks = (unsigned)combine_blocks((long long)p.T * p.H, true);
  return launch_pdl(dsa_verify_combine_wide_kernel, blocks, COMBINE_WIDE_WARPS * 32, p, stream);
}

template <typename C>
struct Tag {
  using type = C;
};
// The one table of this module's kernels: calls f(Tag<C>{}) with the config type of (cfg, fp8) and
// returns true, or returns false where the module has no such kernel (a config not compiled into
// this build, or bf16 of an fp8-only config).
template <typename F>
static bool with_config(int cfg, bool fp8, F&& f) {
  switch (cfg) {
    case 0: fp8 ? f(Tag<M16F>{}) : f(Tag<M16B>{}); return true;
    case 1: fp8 ? f(Tag<M32F>{}) : f(Tag<M32B>{}); return true;
    case 6: fp8 ? f(Tag<N8SF>{}) : f(Tag<N8SB>{}); return true;
    case 12: if (!fp8) return false; f(Tag<N8RWF>{}); return true;  // fp8 only
#if DSAV_BUILD_CFG90
    case 2: fp8 ? f(Tag<M64F>{}) : f(Tag<M64B>{}); return true;
    case 3: fp8 ? f(Tag<M16DF>{}) : f(Tag<M16DB>{}); return true;
    case 4: fp8 ? f(Tag<M16WF>{}) : f(Tag<M16WB>{}); return true;
    case 5: fp8 ? f(Tag<N8F>{}) : f(Tag<N8B>{}); return true;
    case 7: fp8 ? f(Tag<N8WF>{}) : f(Tag<N8WB>{}); return true;
    case 8: if (!fp8) return false; f(Tag<N8RF>{}); return true;  // fp8 only
    case 13: fp8 ? f(Tag<W64F>{}) : f(Tag<W64B>{}); return true;
#endif
#if DSAV_EXP90
    case 11: if (!fp8) return false; f(Tag<N8RSF>{}); return true;
    case 14: if (fp8) return false; f(Tag<N8XB>{}); return true;  // bf16 only
    case 15: if (fp8) return false; f(Tag<N8X8B>{}); return true;  // bf16 only
    case 16: if (!fp8) return false; f(Tag<N8XRF>{}); return true;  // fp8 only
    case 17: if (!fp8) return false; f(Tag<N8XRSF>{}); return true;  // fp8 only
#endif
    default: return false;
  }
}

int config_block_m(int cfg) {
  int bm = 0;
  if (!with_config(cfg, true, [&](auto t) { bm = decltype(t)::type::BM; }))
    with_config(cfg, false, [&](auto t) { bm = decltype(t)::type::BM; });
  return bm;
}

int config_smem_bytes(int cfg, bool fp8) {
  int bytes = 0;
  with_config(cfg, fp8, [&](auto t) { bytes = decltype(t)::type::bytes; });
  return bytes;
}

bool config_compiled(int cfg) {  // a kernel for either cache kind
  return with_config(cfg, true, [](auto) {}) || with_config(cfg, false, [](auto) {});
}

int config_max_clusters(int cfg, bool fp8, int size) {  // 0 for the configs without a cluster path
  int n = 0;
  with_config(cfg, fp8, [&](auto t) { n = max_clusters<typename decltype(t)::type>(size); });
  return n;
}

int config_ctas_per_sm(int cfg, bool fp8) {
  int n = 0;
  with_config(cfg, fp8, [&](auto t) { n = occupancy<typename decltype(t)::type>(); });
  return n;
}

cudaError_t launch(const Params& p, int cfg, bool fp8, cudaStream_t stream) {
  if (p.T <= 0 || p.H <= 0) return cudaSuccess;
  if (p.S < 1 || p.S > COMBINE_MAX_SPLITS || p.chunk < 1 || (p.S > 1 && !p.cluster && (!p.ws_o || !p.ws_lse)))
    return cudaErrorInvalidValue;
  // a cluster merge on a config without one (C::CLUSTER_OK: m16, m16d, m16w) is refused by launch_split
  if (p.cluster && (p.cluster != p.S || p.S < 2)) return cudaErrorInvalidValue;
  cudaError_t e = cudaErrorInvalidValue;  // also for a kernel this module lacks
  with_config(cfg, fp8, [&](auto t) { e = launch_split<typename decltype(t)::type>(p, stream); });
  if (e != cudaSuccess || p.S == 1 || p.cluster) return e;
  return p.combine_wide ? launch_combine_wide(p, stream) : launch_combine(p, stream);
}

}  // namespace dsav
