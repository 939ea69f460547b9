// Sparse (DSA) MLA verify attention, heads-in-N configs ("n8", "n8s"): up to 8 heads of a row
// per CTA, the mma roles swapped so that no tensor-core row is padding at H = 8 (GLM-5 at TP8).
//
//   S^T [16 positions x 8 heads] = K [16 x 576] . Q^T          (m16n8k16: A = K tile, B = Q)
//   O^T [512 dims x 8 heads]    += V^T [512 x 16] . P^T        (A = V^T via ldmatrix.trans, B = P^T)
//
// Every warp is an independent split of the CTA's positions: warp w owns positions
// [pb + j*BN + 16w, +16) of CTA tile j (BN = 16 * WARPS), loads them into its own cp.async ring,
// and keeps its own running max / sum / O^T in registers, so the main loop has no block barrier
// (cp.async.wait_group + __syncwarp only). P goes from the S accumulators to the PV B operand by
// movmatrix.trans (registers, no shared memory). The warps merge once at the end, through shared
// memory, in fixed warp order (deterministic), then write o / lse (S = 1) or the split partial.
// fp8 rows land raw in the warp's ring and are dequantized into the warp's bf16 tile.
//
// Layouts and the used-entry rule are the m16 kernels' (dsa_verify_kernel.cuh, whose helpers this
// file uses). Index words of the first STAGES tiles are loaded before seq_lens is known (one HBM
// round trip, not two), and Q is issued before either.
#pragma once
#include "dsa_verify_kernel.cuh"

namespace dsav {

template <int WARPS_, int STAGES_, bool FP8_>
struct CfgN {
  static constexpr int WARPS = WARPS_, STAGES = STAGES_;
  static constexpr bool FP8 = FP8_;
  static constexpr bool N8 = true;
  static constexpr bool CLUSTER_OK = false;  // no cluster merge (the warps merge in the CTA)
  static constexpr int MAX_CLUSTER = 16;
  static constexpr int BM = 8;              // heads per CTA (the mma N)
  static constexpr int WR = 16;             // positions per warp tile (the mma M)
  static constexpr int BN = WR * WARPS;     // positions per CTA tile
  static constexpr int THREADS = WARPS * 32;
  static constexpr int RAW_ROW = FP8 ? FP8_ROW : BF_ROW;
  static constexpr int RAW_STAGE = WR * RAW_ROW;    // one warp's stage
  static constexpr int CVT_TILE = WR * BF_ROW;      // one warp's dequantized tile (fp8)
  static constexpr int PSTR = D_V + 4;              // merge row stride (floats)
  static constexpr int off_q = 0;
  static constexpr int off_ring = BM * BF_ROW;
  static constexpr int off_cvt = off_ring + WARPS * STAGES * RAW_STAGE;
  static constexpr int off_mask = off_cvt + (FP8 ? WARPS * CVT_TILE : 0);
  static constexpr int bytes = off_mask + WARPS * STAGES * 4;
  // the end-of-kernel merge reuses the drained ring: O^T [WARPS][8][PSTR] + m, l [WARPS][8]
  static constexpr int MERGE_BYTES = WARPS * BM * PSTR * 4 + 2 * WARPS * BM * 4;
  static_assert(MERGE_BYTES <= WARPS * STAGES * RAW_STAGE, "merge space must fit the ring");
  static_assert(BF_CHUNKS % 8 == 0 && WR % 4 == 0, "8 lanes per row, 4 rows per loader step");
};

__device__ __forceinline__ uint32_t movmatrix_t(uint32_t a) {
  uint32_t d;
  asm volatile("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;\n" : "=r"(d) : "r"(a));
  return d;
}
__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&v);
}

template <typename C>
__global__ void __launch_bounds__(C::THREADS, 1) dsa_verify_n8_kernel(const Params p) {
  constexpr int WR = C::WR, BN = C::BN, STAGES = C::STAGES, BM = C::BM;
  extern __shared__ __align__(128) uint8_t smem[];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int t = blockIdx.x, s = blockIdx.y, m = blockIdx.z;
  const int h0 = m * BM;
  DSAV_SPLIT_STAMP(0, dsav_now());
  if (p.early_trigger) asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
  if (h0 >= p.H) {
    DSAV_SPLIT_STAMP(4, dsav_now());
    return;
  }
  const uint32_t sQ = smem_u32(smem + C::off_q);
  // ---- Q first (independent of everything else): 8 rows x 72 chunks, rows >= H zero-filled ----
  {
    for (int i = tid; i < BM * BF_CHUNKS; i += C::THREADS) {
      const int r = i / BF_CHUNKS, ch = i % BF_CHUNKS;
      const bool ok = h0 + r < p.H;
      const __nv_bfloat16* src = p.q + (int64_t)t * p.q_st + (int64_t)(ok ? h0 + r : 0) * p.q_sh + ch * 8;
      cp_async16(sQ + swz(r, ch), src, ok ? 16 : 0);
    }
    cp_async_commit();
  }
  // ---- index words of this warp's first STAGES tiles, before seq_lens is known ----
  // lane r < 16 holds the slot of row r of the warp tile (lanes 16..31 repeat rows 0..15)
  const int row = lane & 15;
  const int pb = s * p.chunk;
  const int cend = min(pb + p.chunk, p.topk);
  const int32_t* idx_row = p.idx + (int64_t)t * p.idx_st;
  int32_t raw_idx[STAGES];
#pragma unroll
  for (int st = 0; st < STAGES; ++st) {
    const int pos = pb + st * BN + warp * WR + row;
    raw_idx[st] = pos < cend ? __ldg(idx_row + pos) : -1;
  }
  int nv = __ldg(p.seq_lens + t);
  nv = nv < 0 ? 0 : (nv > p.topk ? p.topk : nv);
  const int pe = min(pb + p.chunk, nv);
  const int ntiles = pe > pb ? (pe - pb + BN - 1) / BN : 0;
  const int64_t rows_total = (int64_t)p.T * p.H;

  if (ntiles == 0) {  // nothing visible in this split
    cp_async_wait<0>();
    if (p.S > 1) {
      for (int r = tid; r < BM; r += C::THREADS)
        if (h0 + r < p.H) p.ws_lse[(int64_t)s * rows_total + (int64_t)t * p.H + h0 + r] = -INFINITY;
    } else {
      for (int i = tid; i < BM * (D_V / 8); i += C::THREADS) {
        const int r = i / (D_V / 8), ch = i % (D_V / 8);
        if (h0 + r < p.H)
          *reinterpret_cast<uint4*>(p.o + (int64_t)t * p.o_st + (int64_t)(h0 + r) * p.o_sh + ch * 8) =
              make_uint4(0, 0, 0, 0);
      }
      if (p.lse)
        for (int r = tid; r < BM; r += C::THREADS)
          if (h0 + r < p.H) p.lse[(int64_t)t * p.H + h0 + r] = -INFINITY;
    }
    DSAV_SPLIT_STAMP(4, dsav_now());
    return;
  }

  const uint32_t sRing = smem_u32(smem + C::off_ring) + warp * STAGES * C::RAW_STAGE;
  uint32_t* vmask = reinterpret_cast<uint32_t*>(smem + C::off_mask) + warp * STAGES;
  // slot of this lane's row in warp tile j, given its raw index word; -1 = unused
  auto slot_ok = [&](int j, int32_t w) -> int32_t {  // slot of row `row` of warp tile j; -1 = unused
    const int pos = pb + j * BN + warp * WR + row;
    if (j >= ntiles || pos >= pe) return -1;
    return (w >= 0 && (int64_t)w < p.num_slots) ? w : -1;
  };
  // loader: 8 lanes per row (128 contiguous bytes per row per instruction), rows lane/8 + 4k
  auto issue = [&](int stage, int32_t sl) {
    const uint32_t bits = __ballot_sync(0xffffffffu, sl >= 0) & 0xffffu;  // rows 0..15 (lanes 16..31 repeat)
    const uint32_t dst = sRing + stage * C::RAW_STAGE;
    const int sub = lane & 7;
#pragma unroll
    for (int k = 0; k < WR / 4; ++k) {
      const int r = (lane >> 3) + 4 * k;
      const int32_t sr = __shfl_sync(0xffffffffu, sl, r);
      const bool ok = (bits >> r) & 1u;
      const uint8_t* src = p.kv + (int64_t)(ok ? sr : 0) * p.kv_st;
      if constexpr (C::FP8) {
        for (int ch = sub; ch < FP8_CHUNKS; ch += 8) cp_async16(dst + r * FP8_ROW + ch * 16, src + ch * 16, ok ? 16 : 0);
      } else {
#pragma unroll
        for (int it = 0; it < BF_CHUNKS / 8; ++it) {
          const int ch = sub + 8 * it;
          cp_async16(dst + swz(r, ch), src + ch * 16, ok ? 16 : 0);
        }
      }
    }
    if (lane == 0) vmask[stage] = bits;
  };
#pragma unroll
  for (int st = 0; st < STAGES; ++st) {
    if (st < ntiles) issue(st, slot_ok(st, raw_idx[st]));
    cp_async_commit();  // group 1 + st (Q is group 0)
  }
  DSAV_SPLIT_STAMP(1, dsav_now());
  DSAV_SPLIT_STAMP(5, (unsigned long long)smid_now());
  DSAV_SPLIT_STAMP(6, (unsigned long long)ntiles);
  int32_t next_raw = -1;
  {
    const int pos = pb + STAGES * BN + warp * WR + row;
    next_raw = pos < pe ? __ldg(idx_row + pos) : -1;
  }
  cp_async_wait<STAGES>();  // Q landed (group 0) for this thread
  __syncthreads();          // ... and for every thread (the only block barrier before the merge)

  const int g = lane >> 2, c = lane & 3;
  float o_acc[D_V / 16][4];
#pragma unroll
  for (int i = 0; i < D_V / 16; ++i) o_acc[i][0] = o_acc[i][1] = o_acc[i][2] = o_acc[i][3] = 0.f;
  float m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.f, 0.f};  // heads 2c, 2c+1

  for (int j = 0; j < ntiles; ++j) {
    const int stage = j % STAGES;
    cp_async_wait<STAGES - 1>();
    __syncwarp();  // this warp's tile j visible to all its lanes
    if (j == 0 && warp == 0) DSAV_SPLIT_STAMP(2, dsav_now());
    const uint32_t mask = vmask[stage];
    uint32_t sK;
    if constexpr (C::FP8) {
      // dequantize the warp's raw stage into its bf16 tile: 16 rows x (32 e4m3 chunks + 8 rope chunks)
      const uint8_t* raw = smem + C::off_ring + (warp * STAGES + stage) * C::RAW_STAGE;
      uint8_t* cvt = smem + C::off_cvt + warp * C::CVT_TILE;
#pragma unroll 2
      for (int task = lane; task < WR * 40; task += 32) {
        const int r = task / 40, k = task % 40;
        const uint8_t* rr = raw + r * FP8_ROW;
        if (k < 32) {
          const float sc = reinterpret_cast<const float*>(rr + 512)[k >> 3];
          const uint4 v = *reinterpret_cast<const uint4*>(rr + k * 16);
          const uint32_t w4[4] = {v.x, v.y, v.z, v.w};
          uint32_t ow[8];
#pragma unroll
          for (int q = 0; q < 4; ++q) {
            const __half2_raw lo = __nv_cvt_fp8x2_to_halfraw2((__nv_fp8x2_storage_t)(w4[q] & 0xffffu), __NV_E4M3);
            const __half2_raw hi = __nv_cvt_fp8x2_to_halfraw2((__nv_fp8x2_storage_t)(w4[q] >> 16), __NV_E4M3);
            const float2 flo = __half22float2(*reinterpret_cast<const __half2*>(&lo));
            const float2 fhi = __half22float2(*reinterpret_cast<const __half2*>(&hi));
            ow[2 * q] = pack_bf16(flo.x * sc, flo.y * sc);
            ow[2 * q + 1] = pack_bf16(fhi.x * sc, fhi.y * sc);
          }
          *reinterpret_cast<uint4*>(cvt + swz(r, 2 * k)) = make_uint4(ow[0], ow[1], ow[2], ow[3]);
          *reinterpret_cast<uint4*>(cvt + swz(r, 2 * k + 1)) = make_uint4(ow[4], ow[5], ow[6], ow[7]);
        } else {
          *reinterpret_cast<uint4*>(cvt + swz(r, 64 + (k - 32))) = *reinterpret_cast<const uint4*>(rr + 528 + (k - 32) * 16);
        }
      }
      __syncwarp();  // compute tile written; the raw stage is free
      if (j + STAGES < ntiles) issue(stage, slot_ok(j + STAGES, next_raw));
      cp_async_commit();
      {
        const int pos = pb + (j + STAGES + 1) * BN + warp * WR + row;
        next_raw = pos < pe ? __ldg(idx_row + pos) : -1;
      }
      sK = smem_u32(cvt);
    } else {
      sK = sRing + stage * C::RAW_STAGE;
    }

    // ---- S^T = K Q^T: 16 positions x 8 heads over 576 dims (4 accumulator chains) ----
    float sx[4][4];
#pragma unroll
    for (int a = 0; a < 4; ++a) sx[a][0] = sx[a][1] = sx[a][2] = sx[a][3] = 0.f;
#pragma unroll 1
    for (int kq = 0; kq < D_QK / 64; ++kq) {  // four k-steps per iteration, one per chain
      uint32_t b[8], a[4][4];
      ldsm_x4(sQ + swz(lane & 7, 8 * kq + (lane >> 3)), b[0], b[1], b[2], b[3]);
      ldsm_x4(sQ + swz(lane & 7, 8 * kq + 4 + (lane >> 3)), b[4], b[5], b[6], b[7]);
#pragma unroll
      for (int u = 0; u < 4; ++u) ldsm_x4(sK + swz(lane & 15, 8 * kq + 2 * u + (lane >> 4)), a[u][0], a[u][1], a[u][2], a[u][3]);
#pragma unroll
      for (int u = 0; u < 4; ++u) mma_bf16(sx[u], a[u][0], a[u][1], a[u][2], a[u][3], b[2 * u], b[2 * u + 1]);
    }
    float sv[4];
#pragma unroll
    for (int e = 0; e < 4; ++e) sv[e] = (sx[0][e] + sx[1][e]) + (sx[2][e] + sx[3][e]);
    // sv: [0] (pos g, head 2c) [1] (g, 2c+1) [2] (g+8, 2c) [3] (g+8, 2c+1)
    const bool v0 = (mask >> g) & 1u, v1 = (mask >> (g + 8)) & 1u;
    sv[0] = v0 ? sv[0] * p.scale_log2 : -INFINITY;
    sv[1] = v0 ? sv[1] * p.scale_log2 : -INFINITY;
    sv[2] = v1 ? sv[2] * p.scale_log2 : -INFINITY;
    sv[3] = v1 ? sv[3] * p.scale_log2 : -INFINITY;
    // ---- online softmax per head over the warp's 16 positions (lanes of equal c) ----
    float pr[4];
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      float mx = fmaxf(sv[hh], sv[hh + 2]);
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 4));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 8));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 16));
      const float m_new = fmaxf(m_run[hh], mx);
      const float m_use = m_new == -INFINITY ? 0.f : m_new;
      const float alpha = exp2f(m_run[hh] - m_use);  // m_run = -inf gives 0
      m_run[hh] = m_new;
      pr[hh] = exp2f(sv[hh] - m_use);
      pr[hh + 2] = exp2f(sv[hh + 2] - m_use);
      l_run[hh] = l_run[hh] * alpha + (pr[hh] + pr[hh + 2]);
#pragma unroll
      for (int i = 0; i < D_V / 16; ++i) {
        o_acc[i][hh] *= alpha;
        o_acc[i][hh + 2] *= alpha;
      }
    }
    // P^T as the PV B operand: positions 0..7 and 8..15, transposed in registers
    const uint32_t pb0 = movmatrix_t(pack_bf16(pr[0], pr[1]));
    const uint32_t pb1 = movmatrix_t(pack_bf16(pr[2], pr[3]));
    // ---- O^T += V^T P^T: 32 m-tiles of 16 dims, one k-step of 16 positions ----
    const int vrow = (lane & 7) + ((lane >> 4) & 1) * 8, vch = (lane >> 3) & 1;
#pragma unroll
    for (int i = 0; i < D_V / 16; ++i) {
      uint32_t a0, a1, a2, a3;
      ldsm_x4_t(sK + swz(vrow, 2 * i + vch), a0, a1, a2, a3);
      mma_bf16(o_acc[i], a0, a1, a2, a3, pb0, pb1);
    }
    if constexpr (!C::FP8) {
      __syncwarp();  // every lane done with this stage before it is refilled
      if (j + STAGES < ntiles) issue(stage, slot_ok(j + STAGES, next_raw));
      cp_async_commit();
      const int pos = pb + (j + STAGES + 1) * BN + warp * WR + row;
      next_raw = pos < pe ? __ldg(idx_row + pos) : -1;
    }
  }
  cp_async_wait<0>();
  DSAV_SPLIT_STAMP(3, dsav_now());
#pragma unroll
  for (int hh = 0; hh < 2; ++hh) {
    l_run[hh] += __shfl_xor_sync(0xffffffffu, l_run[hh], 4);
    l_run[hh] += __shfl_xor_sync(0xffffffffu, l_run[hh], 8);
    l_run[hh] += __shfl_xor_sync(0xffffffffu, l_run[hh], 16);
  }
  __syncthreads();  // every warp done with its ring: it becomes the merge space
  float* mo = reinterpret_cast<float*>(smem + C::off_ring);  // [WARPS][8][PSTR]
  float* mm = mo + C::WARPS * BM * C::PSTR;                   // [WARPS][8] max (log2 units)
  float* ml = mm + C::WARPS * BM;                              // [WARPS][8] sum
  {
    float* ow = mo + warp * BM * C::PSTR;
#pragma unroll
    for (int i = 0; i < D_V / 16; ++i) {
      ow[(2 * c) * C::PSTR + 16 * i + g] = o_acc[i][0];
      ow[(2 * c + 1) * C::PSTR + 16 * i + g] = o_acc[i][1];
      ow[(2 * c) * C::PSTR + 16 * i + g + 8] = o_acc[i][2];
      ow[(2 * c + 1) * C::PSTR + 16 * i + g + 8] = o_acc[i][3];
    }
    if (g == 0) {
      mm[warp * BM + 2 * c] = m_run[0];
      mm[warp * BM + 2 * c + 1] = m_run[1];
      ml[warp * BM + 2 * c] = l_run[0];
      ml[warp * BM + 2 * c + 1] = l_run[1];
    }
  }
  __syncthreads();
  // ---- merge the warps in fixed order, normalize, write: thread = (head, 4 dims) units ----
  for (int u = tid; u < BM * (D_V / 4); u += C::THREADS) {
    const int r = u / (D_V / 4), d = (u % (D_V / 4)) * 4;
    const int h = h0 + r;
    if (h >= p.H) continue;
    float mx = -INFINITY;
#pragma unroll
    for (int w = 0; w < C::WARPS; ++w) mx = fmaxf(mx, mm[w * BM + r]);
    const float mref = mx == -INFINITY ? 0.f : mx;
    float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
    float l = 0.f;
#pragma unroll
    for (int w = 0; w < C::WARPS; ++w) {
      const float wt = exp2f(mm[w * BM + r] - mref);  // an empty warp: exp2(-inf) = 0, its O is 0
      const float4 v = *reinterpret_cast<const float4*>(mo + (w * BM + r) * C::PSTR + d);
      acc.x += wt * v.x;
      acc.y += wt * v.y;
      acc.z += wt * v.z;
      acc.w += wt * v.w;
      l += wt * ml[w * BM + r];
    }
    const float inv = l > 0.f ? 1.f / l : 0.f;
    const float lse2 = l > 0.f ? mref + log2f(l) : -INFINITY;
    const int64_t grow = (int64_t)t * p.H + h;
    if (p.S == 1) {
      __nv_bfloat16* dst = p.o + (int64_t)t * p.o_st + (int64_t)h * p.o_sh + d;
      uint2 pk;
      pk.x = pack_bf16(acc.x * inv, acc.y * inv);
      pk.y = pack_bf16(acc.z * inv, acc.w * inv);
      *reinterpret_cast<uint2*>(dst) = pk;
      if (p.lse && d == 0) p.lse[grow] = lse2 * 0.6931471805599453f;
    } else {
      float* dst = p.ws_o + ((int64_t)s * rows_total + grow) * D_V + d;
      *reinterpret_cast<float4*>(dst) = make_float4(acc.x * inv, acc.y * inv, acc.z * inv, acc.w * inv);
      if (d == 0) p.ws_lse[(int64_t)s * rows_total + grow] = lse2;
    }
  }
  DSAV_SPLIT_STAMP(4, dsav_now());
}

}  // namespace dsav
