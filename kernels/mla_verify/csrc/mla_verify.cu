// Launchers for the MLA verify kernels: one translation unit, a few template instantiations.
// Config 0 ("sm90"): BM=64 rows, BN=64 tokens, 2 KV stages, 256 threads (230,912 B smem).
// Config 1 ("sm120"): BM=32 rows, BN=16 tokens, 3 KV stages, 128 threads (93,952 B smem).
// The byte counts are Smem<>::bytes; kernels/mla_verify/tiles.py mirrors the formula.
// MLAV_BUILD_CFG90=0 leaves config 0 out (sm_120a builds: it does not fit 99 KiB).
#include "mla_verify_kernel.cuh"
#include "mla_verify_launch.h"

#ifndef MLAV_BUILD_CFG90
#define MLAV_BUILD_CFG90 1
#endif

namespace mlav {

template <int BM, int BN, int STAGES>
static cudaError_t launch_cfg(const Params& p, int m_tiles, cudaStream_t stream) {
  using C = Cfg<BM, BN, STAGES>;
  constexpr int smem = Smem<BM, BN, STAGES>::bytes;
  auto kern = mla_verify_split_kernel<BM, BN, STAGES>;
  static int attr_device = -1;  // set the >48 KiB opt-in once per device
  int dev = 0;
  cudaError_t e = cudaGetDevice(&dev);
  if (e != cudaSuccess) return e;
  if (attr_device != dev) {
    e = cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    if (e != cudaSuccess) return e;
    attr_device = dev;
  }
  dim3 grid(m_tiles, p.S, p.B);
  kern<<<grid, C::THREADS, smem, stream>>>(p);
  return cudaGetLastError();
}

int config_block_m(int cfg) { return cfg == 0 ? 64 : 32; }

int config_smem_bytes(int cfg) {
  return cfg == 0 ? Smem<64, 64, 2>::bytes : Smem<32, 16, 3>::bytes;
}

bool config_compiled(int cfg) { return cfg == 1 || (cfg == 0 && MLAV_BUILD_CFG90); }

cudaError_t launch(const Params& p, int cfg, int max_len_extend, cudaStream_t stream) {
  if (p.B <= 0 || p.T <= 0 || max_len_extend <= 0) return cudaSuccess;
  const int bm = config_block_m(cfg);
  const long long rows = (long long)max_len_extend * p.H;
  const int m_tiles = (int)((rows + bm - 1) / bm);
  cudaError_t e = cudaErrorInvalidValue;
  if (cfg == 1) {
    e = launch_cfg<32, 16, 3>(p, m_tiles, stream);
  }
#if MLAV_BUILD_CFG90
  if (cfg == 0) e = launch_cfg<64, 64, 2>(p, m_tiles, stream);
#endif
  if (e != cudaSuccess || p.S == 1) return e;
  const long long all_rows = (long long)p.T * p.H;
  if (p.S > COMBINE_MAX_SPLITS) return cudaErrorInvalidValue;
  mla_verify_combine_kernel<<<(unsigned)((all_rows * 4 + 7) / 8), 256, 0, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace mlav
