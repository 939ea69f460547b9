// Host-side launch of a kernel as a programmatic dependent launch (PDL) of the one before it on the stream: the
// combine kernels (their griddepcontrol.wait orders them after the split kernel, and their launch latency overlaps
// its tail) and the dense module's gated fp8 pair's second split kernel. If the driver refuses the attribute, the
// error is cleared and the kernel goes out as a plain stream-ordered launch. Shared by the dense (mla_verify.cu) and
// the sparse (kernels/dsa_verify/csrc/dsa_verify.cu) modules; P is the module's Params.
#pragma once
#include <cuda_runtime.h>

// grid: a block count or a dim3; smem: dynamic shared memory bytes (the kernel's opt-in above 48 KiB is the caller's).
template <typename P>
static cudaError_t launch_pdl(void (*kernel)(P), dim3 grid, unsigned threads, const P& p, cudaStream_t stream,
                              size_t smem = 0) {
  cudaLaunchConfig_t lc = {};
  lc.gridDim = grid;
  lc.blockDim = dim3(threads);
  lc.dynamicSmemBytes = smem;
  lc.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  lc.attrs = attr;
  lc.numAttrs = 1;
  cudaError_t e = cudaLaunchKernelEx(&lc, kernel, p);
  if (e == cudaSuccess) return cudaSuccess;
  (void)cudaGetLastError();  // PDL refused: clear, then a plain stream-ordered launch
  kernel<<<grid, threads, smem, stream>>>(p);
  return cudaGetLastError();
}
