// Host entry points of the DSA verify kernels (no torch dependency).
#pragma once
#include <cuda_runtime.h>

namespace dsav {
struct Params;
// cfg: the tile config index (kernels/dsa_verify/tiles.py; the list with shapes and bytes heads
// csrc/dsa_verify.cu); a config this build lacks is refused (launch: cudaErrorInvalidValue).
// fp8: cache rows are SGLang's 656-byte fp8 layout instead of 576 bf16.
cudaError_t launch(const Params& p, int cfg, bool fp8, cudaStream_t stream);
int config_block_m(int cfg);
long long combine_blocks(long long rows, bool wide);  // CTAs of the (wide) combine kernel for T*H rows
int config_smem_bytes(int cfg, bool fp8);
bool config_compiled(int cfg);
int config_ctas_per_sm(int cfg, bool fp8);  // occupancy on the current device (0 on error)
int config_max_clusters(int cfg, bool fp8, int size);  // resident clusters of `size` CTAs (0: cannot launch)
// Experimental build only (a diagnostic): launch every kernel with its dynamic smem padded so that
// this SM holds as many CTAs as an SM of smem_per_sm bytes, reserved_per_block of them per block,
// would (sm_120: tiles.py's SM120_*; 0 turns it off); returns false in any other build.
bool set_sm120_occupancy(int smem_per_sm, int reserved_per_block);
}  // namespace dsav
