// Host entry points of the DSA verify kernels (no torch dependency).
#pragma once
#include <cuda_runtime.h>

namespace dsav {
struct Params;
// cfg: 0 = "m16" (16 heads per CTA, BN 32, 2 stages, 128 threads), 1 = "m32" (32 heads, BN 16,
// 3 stages, 128 threads), 2 = "m64" (64 heads, BN 32, 3 stages, 256 threads; sm_90a builds only),
// 3 = "m16d" (16 heads, BN 32, 4 stages, 128 threads; sm_90a builds only), 4 = "m16w" (16 heads,
// BN 64, 2 stages, 256 threads; sm_90a builds only), 5 = "n8" (8 heads in the mma N, 4 warps of 16
// positions, 2 stages per warp; sm_90a builds only), 6 = "n8s" (n8 with 2 warps; every build).
// fp8: cache rows are SGLang's 656-byte fp8 layout instead of 576 bf16.
cudaError_t launch(const Params& p, int cfg, bool fp8, cudaStream_t stream);
int config_block_m(int cfg);
int config_block_n(int cfg);
long long combine_blocks(long long rows);  // CTAs of the combine kernel for T*H rows
int config_smem_bytes(int cfg, bool fp8);
bool config_compiled(int cfg);
int config_ctas_per_sm(int cfg, bool fp8);  // occupancy on the current device (0 on error)
int config_max_clusters(int cfg, bool fp8, int size);  // resident clusters of `size` CTAs (0: cannot launch)
}  // namespace dsav
