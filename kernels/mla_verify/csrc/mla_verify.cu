// Launchers for the MLA verify kernels: one translation unit, a few template instantiations.
// Config 0 ("sm90"):   mma.sync, BM=64 rows, BN=64 tokens, 2 KV stages, 256 threads (230,912 B smem).
// Config 1 ("sm120"):  mma.sync, BM=32 rows, BN=16 tokens, 3 KV stages, 128 threads (93,952 B smem).
// Config 2 ("sm90wg"): wgmma,    BM=64 rows, BN=64 tokens, 2 KV stages, 256 threads (231,424 B smem).
// The byte counts are Smem<>::bytes / wg::Smem::bytes; kernels/mla_verify/tiles.py mirrors them.
// MLAV_BUILD_CFG90=0 leaves configs 0 and 2 out (sm_120a builds: no wgmma, and 99 KiB of smem).
#include "mla_verify_kernel.cuh"
#include "mla_verify_launch.h"
#include "pdl_launch.h"

#ifndef MLAV_BUILD_CFG90
#define MLAV_BUILD_CFG90 1
#endif
#if MLAV_BUILD_CFG90
#include "mla_verify_wgmma.cuh"
#include "mla_verify_wgmma_ws.cuh"
#include "mla_verify_wgmma_ws_fp8.cuh"
#endif
// The wgmma config's bf16 calls: 1 (shipped) launch the warp-specialized kernel (mla_verify_wgmma_ws.cuh) with its
// token-split consumers (MODE 0) or, by grid size, its ASYM ones (MODE 1; below); 2 (experimental) ASYM always; 3
// (experimental) with the choice per CTA (MODE 2); 0 (an A/B tree's baseline) mla_verify_wgmma.cuh's bf16
// instantiation, which loads its own tiles. The fp8 calls launch mla_verify_wgmma.cuh's kernels either way.
#ifndef MLAV_WS
#define MLAV_WS 1
#endif
// MLAV_WS=1: the ASYM consumers (MODE 1) where one split's grid holds at least MLAV_ASYM_MIN_CTAS CTAs (B x m_tiles:
// host sizes only, so a CUDA graph's replays run their capture's choice, the same as an eager call at the replayed
// length), the token-split ones (MODE 0) elsewhere; 0: MODE 0 always. Why 16 (session 26 call 2, over MODE 0, one
// process, graph replays with L2 flushed): ASYM ran 0.911-0.919 at B=8 L=32k, B=32 L=8k and B=2 L=16k H=128, 0.939 at
// B=32 L=2k, 0.965-0.976 at B=8 L=8k, B=16 n=4 L=32k and B=32 L=512, but 1.018-1.063 at B=8 L=512 / 2k and B=16 n=4
// L=4k (a 1-4 tile split runs its softmax in one warpgroup), 1.036 at 8 CTAs (B=4 L=8k) and 1.14 at 2 (B=1 L=4k).
// The rule cannot see the length (a graph's buffers are max-sized), so 16 takes the long-context gains at B=8 and
// pays ~1.5 µs at its short lengths; graph-buffer ratios 1.002-1.096, bitwise; parity 53/53 + 52/52 bitwise,
// memcheck / racecheck clean on the cases ASYM serves.
#ifndef MLAV_ASYM_MIN_CTAS
#define MLAV_ASYM_MIN_CTAS 16
#endif
// The fp8 calls that take the f16 arithmetic: p.fp8_f16 = 2 (api.fp8_f16: long prefix chunks) launches the
// warp-specialized fp8 kernel (mla_verify_wgmma_ws_fp8.cuh, session 43) where MLAV_WS_FP8 = 1, mla_verify_wgmma.cuh's
// F16 kernel where 0 (an A/B tree's baseline); p.fp8_f16 = 1 the F16 kernel, 0 the bf16 decode, either way. Its
// consumers are the ASYM ones at every grid size (session 44), unlike the bf16 calls' (MLAV_ASYM_MIN_CTAS): flag 2
// means >= 2,048 prefix tokens per split (32 tiles), the long splits where ASYM's gains come from. Session 44 call 2
// (H100, fp8 cache, f16 arithmetic, graph replays, L2 flushed, one process; docs/results/session44_calls/
// call2_ab_asym_fp8.json), ASYM over session 43's token-split (MODE 0) consumers: 0.957 at (4, 131072, 4, 16) (4 CTAs
// per split), 0.957 at (8, 32768, 8, 16), 0.960 at (32, 8192, 8, 16), 0.931 at (4, 65536, 4, 64), 0.956 at
// (16, 32768, 4, 16); parity 12/12, racecheck and synccheck clean. The MODE 0 consumers were then removed (session
// 44; they ran slower on every row measured, 1,024 to 8,192 tokens per split, and live in git history).
#ifndef MLAV_WS_FP8
#define MLAV_WS_FP8 1
#endif
// p.fp8_f16 = 3 and 4 (api.fp8_f16: an fp8 call captured into a CUDA graph, whose buffers say nothing of the lengths
// its replays run) launch the bf16 decode (3, fp8_path "auto") or the F16 kernel (4, "f16") and then, as its
// programmatic dependent, the warp-specialized fp8 kernel on the same grid, each gated by the replayed length
// (p.fp8_gate, mla_verify_kernel.cuh fp8_gate_shut): a replay runs the kernel an eager call of its length runs
// ("auto"'s middle range, 256 to 2,047 tokens a split, where an eager call takes the F16 kernel, replays on the bf16
// decode). The threshold is tiles.SM90WG.fp8_ws_min_tokens (a CPU test compares the two).
#define MLAV_WS_FP8_MIN_TOKENS 2048
#ifndef MLAV_GATE_WS_FIRST
#define MLAV_GATE_WS_FIRST 0
#endif
// MLAV_WS=1 and MLAV_PART_BF16 builds: MODE 0 launches with the staged bf16 epilogue (STAGE, mla_verify_wgmma_ws.cuh)
// where one split's grid holds at least MLAV_STAGE_MIN_CTAS CTAs, with write_rows' fp32 partials below that. 1 (the
// default, measured): staged always, and the unstaged MODE 0 kernel is not built. 4 (experimental): in graphs captured
// on max-sized buffers, what SGLang replays, staging ran 0.914 at B=4 n=4 L=4k and 0.968 at 32k (4 CTAs per split) but
// 1.006 at B=1 L=4k and 1.024 at 512 (2 CTAs), and with it the B=1 L=4k graph-buffer row read 1.090-1.103 of its
// exact-length call (fp32 partials: 1.025), at the 1.1 gate (H200, session 26 calls 1, 2 and 4). Measured in session 28
// call 1 (H100, one process, docs/results/ab_stage4_session28_call1.json): 4 keeps B=1 on fp32 partials and so loses
// the staged B=1 gains, 0.996 vs 0.879 of fp32 at B=1 L=4k and 0.994 vs 0.933 at 32k, for graph-buffer rows of
// 1.000-1.059 against staged's 1.004-1.087; its max-sized-buffer replays at B=1 are fp32's (1.001 at 4k vs staged's
// 0.948): not adopted.
#ifndef MLAV_STAGE_MIN_CTAS
#define MLAV_STAGE_MIN_CTAS 1
#endif

namespace mlav {

// Sets the >48 KiB dynamic smem opt-in once per (kernel, device) and launches on `stream`.
// pdl: as a programmatic dependent launch (pdl_launch.h: a plain launch where the driver refuses it).
template <typename Kernel>
static cudaError_t launch_split(Kernel kern, int* attr_device, int smem, int threads, dim3 grid, const Params& p,
                                cudaStream_t stream, bool pdl = false) {
  int dev = 0;
  cudaError_t e = cudaGetDevice(&dev);
  if (e != cudaSuccess) return e;
  if (*attr_device != dev) {
    e = cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    if (e != cudaSuccess) return e;
    *attr_device = dev;
  }
  if (pdl) return launch_pdl(kern, grid, threads, p, stream, (size_t)smem);
  kern<<<grid, threads, smem, stream>>>(p);
  return cudaGetLastError();
}

template <int BM, int BN, int STAGES, bool FP8>
static cudaError_t launch_cfg_t(const Params& p, int m_tiles, cudaStream_t stream) {
  static int attr_device = -1;
  return launch_split(mla_verify_split_kernel<BM, BN, STAGES, FP8>, &attr_device, Smem<BM, BN, STAGES>::bytes,
                      Cfg<BM, BN, STAGES>::THREADS, dim3(m_tiles, p.S, p.B), p, stream);
}
template <int BM, int BN, int STAGES>
static cudaError_t launch_cfg(const Params& p, int m_tiles, cudaStream_t stream) {
  return p.kv_fp8 ? launch_cfg_t<BM, BN, STAGES, true>(p, m_tiles, stream)
                  : launch_cfg_t<BM, BN, STAGES, false>(p, m_tiles, stream);
}

#if MLAV_BUILD_CFG90
template <bool FP8, bool F16, bool GATED = false>
static cudaError_t launch_wgmma_t(const Params& p, int m_tiles, cudaStream_t stream, bool pdl = false) {
  static int attr_device = -1;
  return launch_split(wg::mla_verify_split_wgmma_kernel<FP8, F16, GATED>, &attr_device, wg::Smem::bytes, wg::THREADS,
                      dim3(m_tiles, p.S, p.B), p, stream, pdl);
}
// The bf16 call of the warp-specialized kernel runs the ASYM consumers (MLAV_ASYM_MIN_CTAS, above).
static bool ws_asym(const Params& p, int m_tiles) {
  return MLAV_WS == 1 && MLAV_ASYM_MIN_CTAS > 0 && !p.kv_fp8 && (long long)m_tiles * p.B >= MLAV_ASYM_MIN_CTAS;
}
// Its token-split consumers stage their rows and write bf16 partials (MLAV_STAGE_MIN_CTAS, above).
static bool ws_stage(const Params& p, int m_tiles) {
  return MLAV_WS == 1 && MLAV_PART_BF16 != 0 && !p.kv_fp8 && !ws_asym(p, m_tiles) &&
         (long long)m_tiles * p.B >= MLAV_STAGE_MIN_CTAS;
}

// A warp-specialized split kernel (WS_THREADS threads, SMEM bytes of smem: WS_SMEM_BYTES for the bf16 ones,
// WS_FP8_SMEM_BYTES for the fp8 one).
template <auto KERNEL, int SMEM = wg::WS_SMEM_BYTES>
static cudaError_t launch_ws_kernel(const Params& p, int m_tiles, cudaStream_t stream, bool pdl = false) {
  static int attr_device = -1;
  return launch_split(KERNEL, &attr_device, SMEM, wg::WS_THREADS, dim3(m_tiles, p.S, p.B), p, stream, pdl);
}
#if MLAV_WS
template <int MODE, bool STAGE = false>
static cudaError_t launch_ws(const Params& p, int m_tiles, cudaStream_t stream) {
  return launch_ws_kernel<wg::mla_verify_split_wgmma_ws_kernel<MODE, STAGE>>(p, m_tiles, stream);
}
#endif

static cudaError_t launch_wgmma(const Params& p, int m_tiles, cudaStream_t stream) {
  if (!p.kv_fp8) {
#if MLAV_WS
#if MLAV_WS == 1 && MLAV_ASYM_MIN_CTAS > 0
    if (ws_asym(p, m_tiles)) return launch_ws<1>(p, m_tiles, stream);
#endif
#if MLAV_WS == 1 && MLAV_PART_BF16
    if (p.part_bf16) return launch_ws<0, true>(p, m_tiles, stream);  // launch(): ws_stage
#endif
#if MLAV_WS == 1 && MLAV_PART_BF16 && MLAV_STAGE_MIN_CTAS <= 1
    return cudaErrorInvalidValue;  // not reached: every launch that is not ASYM stages (ws_stage)
#else
    return launch_ws<MLAV_WS - 1>(p, m_tiles, stream);
#endif
#else
    return launch_wgmma_t<false, false>(p, m_tiles, stream);
#endif
  }
#if MLAV_WS_FP8
  if (p.fp8_f16 == 2)
    return launch_ws_kernel<wg::mla_verify_split_wgmma_ws_fp8_kernel<false>, wg::WS_FP8_SMEM_BYTES>(p, m_tiles, stream);
  if (p.fp8_f16 >= 3) {  // a CUDA-graph capture: two kernels, gated by the replayed length (MLAV_WS_FP8_MIN_TOKENS)
    Params g = p, w = p;
    g.fp8_f16 = p.fp8_f16 == 4;
    g.fp8_gate = 1;
    g.fp8_ws_min = w.fp8_ws_min = MLAV_WS_FP8_MIN_TOKENS;
    w.fp8_f16 = 2;
    w.fp8_gate = 2;
    auto first = [&](bool pdl) {
      return g.fp8_f16 ? launch_wgmma_t<true, true, true>(g, m_tiles, stream, pdl)
                       : launch_wgmma_t<true, false, true>(g, m_tiles, stream, pdl);
    };
    auto ws = [&](bool pdl) {
      return launch_ws_kernel<wg::mla_verify_split_wgmma_ws_fp8_kernel<true>, wg::WS_FP8_SMEM_BYTES>(w, m_tiles,
                                                                                                    stream, pdl);
    };
    const cudaError_t e = MLAV_GATE_WS_FIRST ? ws(false) : first(false);
    if (e != cudaSuccess) return e;
    return MLAV_GATE_WS_FIRST ? first(true) : ws(true);
  }
#endif
  // (fp8_f16 3 and 4 without the warp-specialized kernel: the first kernel alone, ungated)
  return p.fp8_f16 == 1 || p.fp8_f16 == 4 ? launch_wgmma_t<true, true>(p, m_tiles, stream)
                                          : launch_wgmma_t<true, false>(p, m_tiles, stream);
}
#endif

// Blocks of `kernel` resident at once on device `dev` (occupancy x SMs); 0 when unknown (no cap).
// Cached per device in the caller's statics (one pair per kernel).
static long long combine_wave(const void* kernel, int dev, int* cached_dev, long long* wave) {
  if (*cached_dev != dev) {
    int sms = 0, per_sm = 0;
    if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess ||
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, COMBINE_WARPS * 32, 0) != cudaSuccess) {
      (void)cudaGetLastError();
      return 0;
    }
    *wave = (long long)sms * (per_sm > 0 ? per_sm : 1);
    *cached_dev = dev;
  }
  return *wave;
}

// Combine launch: programmatic dependent launch (its griddepcontrol.wait orders it after the split
// kernel), so its launch latency overlaps the split kernel's tail; plain launch if refused.
// The grid-stride kernel (32-bit row indices) only for units < 2^31.
template <int WPU, bool BF16>
static cudaError_t launch_combine_wpu(const Params& p, cudaStream_t stream) {
  const long long units = (long long)p.T * p.H * 4;
  long long need = (units + COMBINE_WARPS / WPU - 1) / (COMBINE_WARPS / WPU);
  void (*kernel)(const Params) = mla_verify_combine_kernel<WPU, BF16>;
  int dev = 0;
  if (MLAV_COMBINE_GRID_STRIDE && units < (1LL << 31) && cudaGetDevice(&dev) == cudaSuccess) {
    // more blocks than one resident wave: the grid-stride kernel, capped at one wave of its own
    static int dev1 = -1, dev_gs = -1;
    static long long wave1 = 0, wave_gs = 0;
    const long long w1 = combine_wave((const void*)mla_verify_combine_kernel<WPU, BF16>, dev, &dev1, &wave1);
    if (w1 > 0 && need > w1) {
      const long long wg = combine_wave((const void*)mla_verify_combine_gs_kernel<WPU, BF16>, dev, &dev_gs, &wave_gs);
      if (wg > 0) {
        kernel = mla_verify_combine_gs_kernel<WPU, BF16>;
        if (need > wg) need = wg;
      }
    }
  }
  return launch_pdl(kernel, (unsigned)need, COMBINE_WARPS * 32, p, stream);
}

template <bool BF16>
static cudaError_t launch_combine_t(const Params& p, cudaStream_t stream) {
  switch (combine_warps_per_unit(p.S)) {
    case 1: return launch_combine_wpu<1, BF16>(p, stream);
    case 2: return launch_combine_wpu<2, BF16>(p, stream);
    case 4: return launch_combine_wpu<4, BF16>(p, stream);
    default: return launch_combine_wpu<8, BF16>(p, stream);
  }
}

// bf16-partial combines exist only in MLAV_PART_BF16 builds (p.part_bf16 is 0 in every other).
static cudaError_t launch_combine(const Params& p, cudaStream_t stream) {
  if constexpr (MLAV_PART_BF16 != 0) {
    if (p.part_bf16) return launch_combine_t<true>(p, stream);
  }
  return launch_combine_t<false>(p, stream);
}

#if MLAV_TRACE && MLAV_BUILD_CFG90
int trace_take(unsigned long long* out, int n) {
  const int slots = 3 * wg::TRACE_SLOTS;
  if (n < slots || cudaDeviceSynchronize() != cudaSuccess ||
      cudaMemcpyFromSymbol(out, wg::trace_acc, sizeof(unsigned long long) * slots) != cudaSuccess)
    return -1;
  static const unsigned long long zero[3 * wg::TRACE_SLOTS] = {};
  return cudaMemcpyToSymbol(wg::trace_acc, zero, sizeof(zero)) == cudaSuccess ? slots : -1;
}
#elif MLAV_TRACE
int trace_take(unsigned long long*, int) { return -1; }  // no wgmma kernel in this build
#endif

int config_block_m(int cfg) { return cfg == 1 ? 32 : 64; }

int config_smem_bytes(int cfg) {
#if MLAV_BUILD_CFG90
  if (cfg == 2) return wg::Smem::bytes;
#endif
  return cfg == 0 ? Smem<64, 64, 2>::bytes : Smem<32, 16, 3>::bytes;
}

// The mma.sync configs decode fp8 to bf16 only: an F16 instance of the sm120 config measured 1.10-1.17x slower
// on the H200 (session 18), and the sm90 config's spilled 248 bytes.
bool config_has_fp8_f16(int cfg) { return cfg == 2; }

int config_fp8_ws_min_tokens(int cfg) {
  return cfg == 2 && MLAV_BUILD_CFG90 && MLAV_WS_FP8 ? MLAV_WS_FP8_MIN_TOKENS : 0;
}

bool config_compiled(int cfg) { return cfg == 1 || ((cfg == 0 || cfg == 2) && MLAV_BUILD_CFG90); }

cudaError_t launch(const Params& p_in, int cfg, int max_len_extend, cudaStream_t stream) {
  if (p_in.B <= 0 || p_in.T <= 0 || max_len_extend <= 0) return cudaSuccess;
  Params p = p_in;
  const int bm = config_block_m(cfg);
  const long long rows = (long long)max_len_extend * p.H;
  const int m_tiles = (int)((rows + bm - 1) / bm);
#if MLAV_BUILD_CFG90
  // the split kernel and the combine agree on the partials' type; only the bf16 warp-specialized kernel's staged
  // MODE 0 writes bf16 ones, and it writes o in 16-byte chunks: rows 16-byte aligned (api.py checks the same; a stride
  // of a size-1 dimension is never applied)
  if constexpr (MLAV_PART_BF16 != 0) {
    p.part_bf16 = cfg == 2 && ws_stage(p, m_tiles);
    if (p.part_bf16 && ((reinterpret_cast<uintptr_t>(p.o) & 15) != 0 || (p.T > 1 && p.o_st % 8 != 0) ||
                        (p.H > 1 && p.o_sh % 8 != 0)))
      return cudaErrorInvalidValue;
  }
#endif
  cudaError_t e = cudaErrorInvalidValue;
  if (cfg == 1) e = launch_cfg<32, 16, 3>(p, m_tiles, stream);
#if MLAV_BUILD_CFG90
  if (cfg == 0) e = launch_cfg<64, 64, 2>(p, m_tiles, stream);
  if (cfg == 2) e = launch_wgmma(p, m_tiles, stream);
#endif
  if (e != cudaSuccess || p.S == 1) return e;
  if (p.S > COMBINE_MAX_SPLITS) return cudaErrorInvalidValue;
  return launch_combine(p, stream);
}

}  // namespace mlav
