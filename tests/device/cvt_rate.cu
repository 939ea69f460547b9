// Throughput of the fp8 -> f16 conversion the DSA n8r kernel leans on, against the f16 mma it feeds
// (sm_90a; device diagnostic, not shipped). One block per SM, 8 warps, 8 independent chains per
// thread; prints instructions per SM per clock for cvt.rn.f16x2.e4m3x2, prmt, movmatrix.trans and
// mma.m16n8k16.f16.
// Build and run: nvcc -arch=sm_90a -O3 -o /tmp/cvt_rate tests/device/cvt_rate.cu && /tmp/cvt_rate
#include <cstdio>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

constexpr int kIters = 4096;
constexpr int kChains = 8;

// One dependent chain per c: v[c] = Op(v[c], v[c + 1]) kIters times (the ops: cvt, prmt, movmatrix)
struct Cvt {
  static __device__ unsigned f(unsigned v, unsigned) {
    unsigned h;
    asm volatile("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(h) : "h"(static_cast<unsigned short>(v)));
    return v ^ h;
  }
};
struct Prmt {
  static __device__ unsigned f(unsigned v, unsigned w) {
    unsigned h;
    asm volatile("prmt.b32 %0, %1, %2, 0x3120;" : "=r"(h) : "r"(v), "r"(w));
    return h + 1u;
  }
};
struct Movm {
  static __device__ unsigned f(unsigned v, unsigned) {
    unsigned h;
    asm volatile("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;" : "=r"(h) : "r"(v));
    return h;
  }
};

template <typename Op>
__global__ void op_loop(unsigned* out, long long* cyc, unsigned seed) {
  unsigned v[kChains];
  for (int c = 0; c < kChains; ++c) v[c] = seed * (threadIdx.x + c + 1);
  long long t0 = clock64();
  for (int i = 0; i < kIters; ++i) {
#pragma unroll
    for (int c = 0; c < kChains; ++c) v[c] = Op::f(v[c], v[(c + 1) % kChains]);
  }
  long long t1 = clock64();
  unsigned acc = 0;
  for (int c = 0; c < kChains; ++c) acc ^= v[c];
  out[blockIdx.x * blockDim.x + threadIdx.x] = acc;
  if (threadIdx.x == 0) cyc[blockIdx.x] = t1 - t0;
}

__global__ void mma_loop(unsigned* out, long long* cyc, unsigned seed) {
  unsigned a[4], b[2];
  for (int k = 0; k < 4; ++k) a[k] = 0x3c003c00u ^ (seed & 0x00ff00ffu);
  b[0] = b[1] = 0x3c003c00u;
  float d[kChains][4] = {};
  long long t0 = clock64();
  for (int i = 0; i < kIters; ++i) {
#pragma unroll
    for (int c = 0; c < kChains; ++c) {
      asm volatile(
          "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
          "{%0,%1,%2,%3};"
          : "+f"(d[c][0]), "+f"(d[c][1]), "+f"(d[c][2]), "+f"(d[c][3])
          : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
    }
  }
  long long t1 = clock64();
  float acc = 0.f;
  for (int c = 0; c < kChains; ++c) acc += d[c][0] + d[c][3];
  out[blockIdx.x * blockDim.x + threadIdx.x] = __float_as_uint(acc);
  if (threadIdx.x == 0) cyc[blockIdx.x] = t1 - t0;
}

template <typename K>
static void run(const char* name, K kernel, int sms, int per_warp_factor) {
  const int threads = 256;
  unsigned* out;
  long long* cyc;
  cudaMalloc(&out, sms * threads * sizeof(unsigned));
  cudaMalloc(&cyc, sms * sizeof(long long));
  kernel<<<sms, threads>>>(out, cyc, 7u);  // warm-up
  kernel<<<sms, threads>>>(out, cyc, 11u);
  cudaError_t e = cudaDeviceSynchronize();
  long long c0 = 0;
  cudaMemcpy(&c0, cyc, sizeof(long long), cudaMemcpyDeviceToHost);
  // per_warp_factor: 32 for per-thread instructions (cvt, prmt), 1 for warp-wide mma
  double insts = double(kIters) * kChains * (threads / 32) * (per_warp_factor == 32 ? 32.0 : 1.0);
  std::printf("%-6s %s  %.1f %s per SM per clock (%lld clocks)\n", name, cudaGetErrorString(e),
              insts / double(c0), per_warp_factor == 32 ? "thread-ops" : "warp-mmas", c0);
  cudaFree(out);
  cudaFree(cyc);
}

int main() {
  int sms = 0;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  run("cvt", op_loop<Cvt>, sms, 32);
  run("prmt", op_loop<Prmt>, sms, 32);
  run("movm", op_loop<Movm>, sms, 1);
  run("mma", mma_loop, sms, 1);
  return 0;
}
