// Launchers of the DSA verify kernels: one translation unit, a few template instantiations.
// cfg 0 "m16": BM 16 heads, BN 32 positions, 2 stages, 128 threads (bf16 94,208 B / fp8 99,328 B smem)
// cfg 1 "m32": BM 32, BN 16, 3 stages, 128 threads (bf16 94,208 B / fp8 88,832 B)
// cfg 2 "m64": BM 64, BN 32, 3 stages, 256 threads (bf16 190,464 B / fp8 179,712 B), sm_90a only
// The byte counts are Cfg<>::bytes; kernels/dsa_verify/tiles.py mirrors them.
// DSAV_BUILD_CFG90=0 leaves cfg 2 out (sm_120a builds: 99 KiB of smem per block).
#include "dsa_verify_kernel.cuh"
#include "dsa_verify_launch.h"

#ifndef DSAV_BUILD_CFG90
#define DSAV_BUILD_CFG90 1
#endif

namespace dsav {

using M16B = Cfg<16, 32, 2, false>;
using M16F = Cfg<16, 32, 2, true>;
using M32B = Cfg<32, 16, 3, false>;
using M32F = Cfg<32, 16, 3, true>;
#if DSAV_BUILD_CFG90
using M64B = Cfg<64, 32, 3, false>;
using M64F = Cfg<64, 32, 3, true>;
#endif

template <typename C>
static cudaError_t launch_split(const Params& p, cudaStream_t stream) {
  static int attr_device = -1;  // >48 KiB dynamic smem opt-in, once per device
  int dev = 0;
  cudaError_t e = cudaGetDevice(&dev);
  if (e != cudaSuccess) return e;
  if (attr_device != dev) {
    e = cudaFuncSetAttribute(dsa_verify_split_kernel<C>, cudaFuncAttributeMaxDynamicSharedMemorySize, C::bytes);
    if (e != cudaSuccess) return e;
    attr_device = dev;
  }
  const dim3 grid((unsigned)p.T, (unsigned)p.S, (unsigned)((p.H + C::BM - 1) / C::BM));
  dsa_verify_split_kernel<C><<<grid, C::THREADS, C::bytes, stream>>>(p);
  return cudaGetLastError();
}

template <typename C>
static int occupancy() {
  int dev = 0, n = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) return 0;
  if (cudaFuncSetAttribute(dsa_verify_split_kernel<C>, cudaFuncAttributeMaxDynamicSharedMemorySize, C::bytes) !=
      cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, dsa_verify_split_kernel<C>, C::THREADS, C::bytes) !=
      cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return n;
}

static cudaError_t launch_combine(const Params& p, cudaStream_t stream) {
  const long long units = (long long)p.T * p.H * 4;
  const unsigned blocks = (unsigned)((units + COMBINE_WARPS - 1) / COMBINE_WARPS);
  cudaLaunchConfig_t lc = {};
  lc.gridDim = dim3(blocks);
  lc.blockDim = dim3(COMBINE_WARPS * 32);
  lc.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  lc.attrs = attr;
  lc.numAttrs = 1;
  cudaError_t e = cudaLaunchKernelEx(&lc, dsa_verify_combine_kernel, p);
  if (e == cudaSuccess) return cudaSuccess;
  (void)cudaGetLastError();  // PDL refused: clear, then a plain stream-ordered launch
  dsa_verify_combine_kernel<<<blocks, COMBINE_WARPS * 32, 0, stream>>>(p);
  return cudaGetLastError();
}

int config_block_m(int cfg) { return cfg == 0 ? 16 : cfg == 1 ? 32 : 64; }
int config_block_n(int cfg) { return cfg == 1 ? 16 : 32; }

int config_smem_bytes(int cfg, bool fp8) {
  if (cfg == 0) return fp8 ? M16F::bytes : M16B::bytes;
  if (cfg == 1) return fp8 ? M32F::bytes : M32B::bytes;
#if DSAV_BUILD_CFG90
  if (cfg == 2) return fp8 ? M64F::bytes : M64B::bytes;
#endif
  return 0;
}

bool config_compiled(int cfg) { return cfg == 0 || cfg == 1 || (cfg == 2 && DSAV_BUILD_CFG90); }

int config_ctas_per_sm(int cfg, bool fp8) {
  if (cfg == 0) return fp8 ? occupancy<M16F>() : occupancy<M16B>();
  if (cfg == 1) return fp8 ? occupancy<M32F>() : occupancy<M32B>();
#if DSAV_BUILD_CFG90
  if (cfg == 2) return fp8 ? occupancy<M64F>() : occupancy<M64B>();
#endif
  return 0;
}

cudaError_t launch(const Params& p, int cfg, bool fp8, cudaStream_t stream) {
  if (p.T <= 0 || p.H <= 0) return cudaSuccess;
  if (p.S < 1 || p.S > COMBINE_MAX_SPLITS || p.chunk < 1 || (p.S > 1 && (!p.ws_o || !p.ws_lse)))
    return cudaErrorInvalidValue;
  cudaError_t e = cudaErrorInvalidValue;
  if (cfg == 0) e = fp8 ? launch_split<M16F>(p, stream) : launch_split<M16B>(p, stream);
  if (cfg == 1) e = fp8 ? launch_split<M32F>(p, stream) : launch_split<M32B>(p, stream);
#if DSAV_BUILD_CFG90
  if (cfg == 2) e = fp8 ? launch_split<M64F>(p, stream) : launch_split<M64B>(p, stream);
#endif
  if (e != cudaSuccess || p.S == 1) return e;
  return launch_combine(p, stream);
}

}  // namespace dsav
