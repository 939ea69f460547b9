// Host-side entry points of the MLA verify kernels (no torch dependency).
#pragma once
#include <cuda_runtime.h>

namespace mlav {
struct Params;
// Launch the split kernel (grid: ceil(max_len_extend*H/BM) x S x B) and, when S > 1, the
// combine kernel. cfg 0 = sm90 (mma.sync), 1 = sm120, 2 = sm90wg (wgmma). Returns the first CUDA error.
cudaError_t launch(const Params& p, int cfg, int max_len_extend, cudaStream_t stream);
int config_block_m(int cfg);
int config_smem_bytes(int cfg);
bool config_compiled(int cfg);
bool config_has_fp8_f16(int cfg);
// Prefix tokens per split from which the config's fp8 calls take the warp-specialized kernel (0: none).
int config_fp8_ws_min_tokens(int cfg);
#if MLAV_TRACE
// Diagnostic build: copies the wgmma split kernel's phase sums (2 x TRACE_SLOTS, mla_verify_wgmma.cuh) to out and
// zeroes them; returns the slot count or -1 on a CUDA error.
int trace_take(unsigned long long* out, int n);
#endif  // the config has an F16 fp8 kernel (tiles.TileConfig.fp8_f16_min_tokens > 0)
}  // namespace mlav
