// Host-side launch of a combine kernel as a programmatic dependent launch (PDL): the kernel's
// griddepcontrol.wait orders it after the split kernel on the same stream, and its launch latency
// overlaps the split kernel's tail. If the driver refuses the attribute, the error is cleared and the
// kernel goes out as a plain stream-ordered launch. Shared by the dense (mla_verify.cu) and the
// sparse (kernels/dsa_verify/csrc/dsa_verify.cu) modules; P is the module's Params.
#pragma once
#include <cuda_runtime.h>

template <typename P>
static cudaError_t launch_pdl(void (*kernel)(P), unsigned blocks, unsigned threads, const P& p, cudaStream_t stream) {
  cudaLaunchConfig_t lc = {};
  lc.gridDim = dim3(blocks);
  lc.blockDim = dim3(threads);
  lc.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  lc.attrs = attr;
  lc.numAttrs = 1;
  cudaError_t e = cudaLaunchKernelEx(&lc, kernel, p);
  if (e == cudaSuccess) return cudaSuccess;
  (void)cudaGetLastError();  // PDL refused: clear, then a plain stream-ordered launch
  kernel<<<blocks, threads, 0, stream>>>(p);
  return cudaGetLastError();
}
