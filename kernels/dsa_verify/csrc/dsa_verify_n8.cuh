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
// REG (n8r) skips that tile: see CfgN::REG.
// fp8 rows land raw in the warp's ring; the warp converts their e4m3 bytes to f16 without the
// scales (exact: every e4m3 value is an f16 value) into its compute tile, rope stays bf16. The
// per-128-dim scales are applied outside the tensor cores instead of on every element:
//   S^T[t, h] = sum_b s[t, b] * qi[h, b] * (K^_b Q^_b^T)[t, h] + (K_rope Q_rope^T)[t, h]
// with Q^_b = Q_b * 2^e[h, b] in f16 (a power of two per (head, block) puts |Q^_b| below 2^15;
// qi = 2^-e), and for the output block b of 128 dims
//   O_b^T = sigma_b * sum_t V^_b[t]^T (P[t] * s[t, b] / sigma_b)
// where sigma_b is the running max over the warp's positions of |s[., b]|, so the f16 P^ operand
// stays in [-1, 1] (P <= 1 after the running softmax max); a larger sigma rescales the O^T block
// by sigma_old / sigma_new together with the softmax alpha. Positions whose |s| is below 2^-24
// sigma_b enter as f16 subnormals (absolute error 2^-25 sigma_b per term).
//
// Layouts and the used-entry rule are the m16 kernels' (dsa_verify_kernel.cuh, whose helpers this
// file uses). Index words of the first STAGES tiles are loaded before seq_lens is known (one HBM
// round trip, not two), and Q is issued before either.
#pragma once
#include "dsa_verify_kernel.cuh"

namespace dsav {

template <int WARPS_, int STAGES_, bool FP8_, bool REG_ = false>
struct CfgN {
  static constexpr int WARPS = WARPS_, STAGES = STAGES_;
  static constexpr bool FP8 = FP8_;
  // REG (fp8 only): the e4m3 bytes go from the raw ring straight into the mma
  // fragments (K by ldmatrix + cvt, V^T by ldmatrix.trans + prmt + cvt): no f16 tile, the ring
  // stays the compute tile, and Q's nope part lives as f16 in the permuted Q16 layout below
  static constexpr bool REG = REG_;
  static_assert(!REG || FP8, "the in-register conversion is an fp8 path");
  static constexpr bool N8 = true;
  static constexpr bool CLUSTER_OK = false;  // no cluster merge (the warps merge in the CTA)
  static constexpr int MAX_CLUSTER = 16;
  static constexpr int BM = 8;              // heads per CTA (the mma N)
  static constexpr int WR = 16;             // positions per warp tile (the mma M)
  static constexpr int BN = WR * WARPS;     // positions per CTA tile
  static constexpr int THREADS = WARPS * 32;
  static constexpr int RAW_ROW = FP8 ? FP8_ROW : BF_ROW;
  static constexpr int SC_OFF = 512;    // fp8: the 4 fp32 scales' byte offset in a raw row
  static constexpr int ROPE_OFF = 528;  // fp8: the rope's byte offset
  static constexpr int NBLK = 4;        // 128-dim blocks (fp8)
  static constexpr int RAW_STAGE = WR * RAW_ROW;    // one warp's stage
  static constexpr int CVT_TILE = WR * BF_ROW;      // one warp's dequantized tile (fp8)
  static constexpr int PSTR = D_V + 4;              // merge row stride (floats)
  // REG: Q16 row h holds dim d = 16 s + 4 c + i (s = 2 P + q) at element 32 P + 8 c + 4 q + i, so
  // one 16-byte load gives lane c the B fragments of two k-steps; rows padded by 64 B (4 bank groups)
  static constexpr int QROW16 = D_V * 2 + 64;
  static constexpr int off_q = 0;
  static constexpr int off_q16 = BM * BF_ROW;
  static constexpr int off_ring = off_q16 + (REG ? BM * QROW16 : 0);
  static constexpr int off_cvt = off_ring + WARPS * STAGES * RAW_STAGE;
  static constexpr int off_mask = off_cvt + (FP8 && !REG ? WARPS * CVT_TILE : 0);
  static constexpr int off_qinv = (off_mask + WARPS * STAGES * 4 + 15) / 16 * 16;  // fp8: qi [4][8] fp32
  static constexpr int off_ssc = off_qinv + (FP8 ? 4 * BM * 4 : 0);  // fp8 (not REG): [WARPS][16][4] scales
  static constexpr int bytes = FP8 ? off_ssc + (REG ? 0 : WARPS * WR * 16) : off_mask + WARPS * STAGES * 4;
  // the end-of-kernel merge reuses the drained ring (and the fp8 compute tiles after it):
  // O^T [WARPS][8][PSTR] + m, l [WARPS][8]
  static constexpr int MERGE_BYTES = WARPS * BM * PSTR * 4 + 2 * WARPS * BM * 4;
  // ... or, where it does not (one raw stage of fp8 REG rows: n8rw), m, l of every warp plus the O^T
  // of MERGE_CAP warps at a time from byte 0 (Q and Q16 are drained too), in MERGE_ROUNDS rounds
  static constexpr int MERGE_CAP =
      MERGE_BYTES <= off_mask - off_ring ? WARPS : (off_mask - 2 * WARPS * BM * 4) / (BM * PSTR * 4);
  static constexpr int MERGE_ROUNDS = (WARPS + MERGE_CAP - 1) / MERGE_CAP;
  static_assert(MERGE_CAP >= 1, "merge space must hold one warp's O^T");
  static_assert(BF_CHUNKS % 8 == 0 && WR % 4 == 0, "8 lanes per row, 4 rows per loader step");
  static constexpr bool XPV = false;  // CfgX below: the PV split by dims across the warps
  static constexpr int OT = D_V / 16;  // O^T m-tiles (16 dims each) a warp accumulates
};

// n8x (CfgX, experimental, bf16 only, sm_90a): n8's S phase and softmax per warp, with the PV split
// by dims as in the m kernels. Per tile, warp w publishes its P^T (16 positions x 8 heads, fp32,
// relative to its own running max m_w) and m_w in shared memory; one block barrier; then every warp
// takes M = max_w m_w per head, rescales its O^T by exp2(M_old - M), and accumulates dims
// [DW w, DW w + DW) over all BN positions of the tile: one k-step per source warp, A = V^T from that
// warp's ring stage (ldmatrix.trans), B = its P^T scaled by exp2(m_w - M), rounded to bf16 once.
// At the end l = sum_w l_w exp2(m_w - M) from shared memory; each warp normalizes and writes its
// own dims: no O^T merge through shared memory (n8's 64 KB at 4 warps). Every warp reads every
// warp's ring stage, so a stage is refilled one barrier later than in n8 (after the next tile's
// barrier; with one stage, after a second barrier behind the tile's PV): for splits of one or two
// tiles (B <= 2), where n8's end merge is a large part of the call. Shared memory: n8's + P
// [2][WARPS][8][PS] fp32 (double-buffered by tile parity) + maxima [2][WARPS][8] + sums [WARPS][8].
// FP8 (n8xr): n8r's in-register path (REG) for the S phase; each consumer warp's dims lie in one
// 128-dim scale block b, whose sigma_b (running max |s[., b]| over every warp's rows, from the
// per-warp tile maxima published beside P) and per-row scales (read from the source warp's raw
// stage) build the f16 B operand P * exp2(m_w - M) * s[t, b] / sigma_b; A = V^T by ldmatrix.trans +
// prmt + cvt from the source warp's raw rows, as in n8r. + [2][WARPS][4] published tile maxima.
template <int WARPS_, int STAGES_, bool FP8_ = false>
struct CfgX : CfgN<WARPS_, STAGES_, FP8_, FP8_> {
  using Base = CfgN<WARPS_, STAGES_, FP8_, FP8_>;
  static constexpr bool XPV = true;
  static constexpr int DW = D_V / WARPS_;  // dims of O^T per warp
  static constexpr int OT = DW / 16;
  static constexpr int PS = 24;  // P^T row stride (floats): the consumers' float2 loads hit distinct banks
  static constexpr int off_p = (Base::bytes + 15) / 16 * 16;
  static constexpr int off_pm = off_p + 2 * WARPS_ * Base::BM * PS * 4;
  static constexpr int off_pl = off_pm + 2 * WARPS_ * Base::BM * 4;
  static constexpr int off_psm = off_pl + WARPS_ * Base::BM * 4;
  static constexpr int bytes = off_psm + (FP8_ ? 2 * WARPS_ * Base::NBLK * 4 : 0);
  static_assert(DW % 16 == 0 && Base::WR == 16, "whole 16-dim m-tiles per warp; one 16-position k-step per warp");
  static_assert(DW <= 128 && 128 % DW == 0, "a warp's dims lie in one 128-dim scale block");
  static_assert(!FP8_ || OT % 2 == 0, "REG's V^T loads take two 16-dim segments at a time");
};

__device__ __forceinline__ uint32_t movmatrix_t(uint32_t a) {
  uint32_t d;
  asm volatile("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;\n" : "=r"(d) : "r"(a));
  return d;
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
    write_empty_split<C>(p, t, s, h0, tid, rows_total);
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
      issue_kv_row<C::FP8>(dst, r, src, ok, sub);
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
  // fp8: sig[b] = running max over the warp's positions of |scale| of block b (warp-uniform);
  // qinv [4][8] = 2^-e per (block, head); ssc = the current tile's scales [16 rows][4 blocks]
  float sig[C::NBLK], sig_r[C::NBLK], sig_i[C::NBLK];
#pragma unroll
  for (int kb = 0; kb < C::NBLK; ++kb) sig[kb] = sig_i[kb] = 0.f;
  const float* qinv = reinterpret_cast<const float*>(smem + C::off_qinv);
  float* ssc = reinterpret_cast<float*>(smem + C::off_ssc) + warp * WR * 4;
  if constexpr (C::FP8) {
    q_nope_to_f16<C, C::REG>(smem, tid);
    __syncthreads();  // the f16 Q and qinv visible to every warp
  }

  float o_acc[C::OT][4];
#pragma unroll
  for (int i = 0; i < C::OT; ++i) o_acc[i][0] = o_acc[i][1] = o_acc[i][2] = o_acc[i][3] = 0.f;
  float m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.f, 0.f};  // heads 2c, 2c+1
  // XPV: the reference max of this warp's O^T columns (heads 2c, 2c+1) over every warp's positions;
  // fp8: sigma of this warp's 128-dim block over every warp's rows, and its inverse
  float mx_run[2] = {-INFINITY, -INFINITY}, mx_use[2] = {0.f, 0.f};
  [[maybe_unused]] float xs = 0.f, xs_i = 0.f;

  for (int j = 0; j < ntiles; ++j) {
    const int stage = j % STAGES;
    if constexpr (C::XPV) {  // from tile 1 on, STAGES - 2 groups follow tile j's: tile k >= STAGES is
                             // issued after barrier k - STAGES + 1 (STAGES = 1: after tile k - 1's PV)
      if (j == 0)
        cp_async_wait<STAGES - 1>();
      else
        cp_async_wait<(STAGES >= 2 ? STAGES - 2 : 0)>();
    } else {
      cp_async_wait<STAGES - 1>();
    }
    __syncwarp();  // this warp's tile j visible to all its lanes
    if (j == 0 && warp == 0) DSAV_SPLIT_STAMP(2, dsav_now());
    const uint32_t mask = vmask[stage];
    uint32_t sK;
    // fp8: scale of block bk of row r of this tile (REG: in the raw stage, the compute tile; else
    // copied to ssc by the conversion below)
    auto scale = [&](int r, int bk) -> float {
      if constexpr (C::REG)
        return reinterpret_cast<const float*>(smem + C::off_ring + (warp * STAGES + stage) * C::RAW_STAGE +
                                              r * C::RAW_ROW + C::SC_OFF)[bk];
      else
        return ssc[r * 4 + bk];
    };
    // fp8 sigma update (positions only; off the S -> softmax -> PV chain): sig_r = sigma_old /
    // sigma_new, sig_i = 1 / sigma_new per block
    // fp8: the largest |scale| of block bk over the warp's 16 rows of this tile (warp-uniform)
    auto rows_smax = [&](int bk) -> float {
      float smax = fmaxf(fabsf(scale(g, bk)), fabsf(scale(g + 8, bk)));
      smax = fmaxf(smax, __shfl_xor_sync(0xffffffffu, smax, 4));
      smax = fmaxf(smax, __shfl_xor_sync(0xffffffffu, smax, 8));
      return fmaxf(smax, __shfl_xor_sync(0xffffffffu, smax, 16));
    };
    auto sigma_update = [&]() {
#pragma unroll
      for (int kb = 0; kb < C::NBLK; ++kb) {
        const float smax = rows_smax(kb);
        // the divisions only where sigma grows (warp-uniform; rare after the first tiles): an
        // unchanged sigma keeps sig_i and has sig_r = 1, the values the divisions would give
        sig_r[kb] = 1.f;
        if (smax > sig[kb]) {
          sig_r[kb] = sig[kb] / smax;
          sig_i[kb] = 1.f / smax;
          sig[kb] = smax;
        }
      }
    };
    if constexpr (C::REG) {
      if constexpr (!C::XPV) sigma_update();  // XPV: the consumers keep sigma of their own block
      sK = sRing + stage * C::RAW_STAGE;
    } else if constexpr (C::FP8) {
      // the warp's raw stage into its compute tile: e4m3 -> f16 (no scale), rope bf16 copied
      const uint8_t* raw = smem + C::off_ring + (warp * STAGES + stage) * C::RAW_STAGE;
      uint8_t* cvt = smem + C::off_cvt + warp * C::CVT_TILE;
      if (lane < WR)
        reinterpret_cast<float4*>(ssc)[lane] = *reinterpret_cast<const float4*>(raw + lane * FP8_ROW + 512);
#pragma unroll 4
      for (int r = 0; r < WR; ++r) fp8_chunk_to_f16(raw + r * FP8_ROW, cvt, r, lane);  // lane = chunk
#pragma unroll
      for (int k = 0; k < WR * 8 / 32; ++k) {
        const int task = lane + 32 * k, r = task >> 3, ch = task & 7;
        *reinterpret_cast<uint4*>(cvt + swz(r, 64 + ch)) = *reinterpret_cast<const uint4*>(raw + r * FP8_ROW + 528 + ch * 16);
      }
      __syncwarp();  // compute tile and scales written; the raw stage is free
      if (j + STAGES < ntiles) issue(stage, slot_ok(j + STAGES, next_raw));
      sigma_update();
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
    // one iteration: 64 dims, four k-steps, one per chain; fp8: nope in f16 (raw e4m3 x scaled Q)
    // folded per 128-dim block with s[t, b] * qi[h, b], rope in bf16
    auto s_kq = [&](int kq, float (&sx)[4][4], bool f16) {
      uint32_t b[8], a[4][4];
      ldsm_x4(sQ + swz(lane & 7, 8 * kq + (lane >> 3)), b[0], b[1], b[2], b[3]);
      ldsm_x4(sQ + swz(lane & 7, 8 * kq + 4 + (lane >> 3)), b[4], b[5], b[6], b[7]);
#pragma unroll
      for (int u = 0; u < 4; ++u) ldsm_x4(sK + swz(lane & 15, 8 * kq + 2 * u + (lane >> 4)), a[u][0], a[u][1], a[u][2], a[u][3]);
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        if (f16)
          mma_f16(sx[u], a[u][0], a[u][1], a[u][2], a[u][3], b[2 * u], b[2 * u + 1]);
        else
          mma_bf16(sx[u], a[u][0], a[u][1], a[u][2], a[u][3], b[2 * u], b[2 * u + 1]);
      }
    };
    // REG: 64 dims (segments 4 kq .. 4 kq + 3 of 16 e4m3) of the nope part, four k-steps into the
    // four chains. ldmatrix (b16) on the raw rows gives lane (g, c) bytes 4c..4c+3 of segment s of
    // rows g and g + 8; its low pair is the A fragment of logical k 2c, 2c+1 (dims 16s + 4c + 0, 1),
    // the high pair k 2c+8, 2c+9 (dims 16s + 4c + 2, 3): the Q16 layout pairs Q the same way.
    // The lane's addresses (K: row arow, segment lane / 16; Q16: row g, chunk c) are formed once
    // per call; the segment offsets are then immediates.
    auto s_kq_reg = [&](int kq, float (&sx)[4][4]) {
      const int arow = (lane & 7) + ((lane >> 3) & 1) * 8;
      const uint32_t ka = sK + arow * C::RAW_ROW + (lane >> 4) * 16 + kq * 64;
      const uint8_t* qrow = smem + C::off_q16 + g * C::QROW16 + c * 16 + kq * 128;
#pragma unroll
      for (int hp = 0; hp < 2; ++hp) {  // segment pairs (4 kq + 2 hp, +1)
        uint32_t r0, r1, r2, r3;
        ldsm_x4(ka + hp * 32, r0, r1, r2, r3);
        const uint4 qb = *reinterpret_cast<const uint4*>(qrow + hp * 64);
        mma_f16(sx[2 * hp], e4m3x2_to_f16x2(r0), e4m3x2_to_f16x2(r1), e4m3x2_to_f16x2<true>(r0), e4m3x2_to_f16x2<true>(r1),
                qb.x, qb.y);
        mma_f16(sx[2 * hp + 1], e4m3x2_to_f16x2(r2), e4m3x2_to_f16x2(r3), e4m3x2_to_f16x2<true>(r2),
                e4m3x2_to_f16x2<true>(r3), qb.z, qb.w);
      }
    };
    float sv[4];
    if constexpr (C::FP8) {
      float sn[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll 1
      for (int kb = 0; kb < C::NBLK; ++kb) {
        const int bk = kb;
        float sx[4][4];
#pragma unroll
        for (int a = 0; a < 4; ++a) sx[a][0] = sx[a][1] = sx[a][2] = sx[a][3] = 0.f;
        if constexpr (C::REG) {
          s_kq_reg(2 * bk, sx);
          s_kq_reg(2 * bk + 1, sx);
        } else {
          s_kq(2 * bk, sx, true);
          s_kq(2 * bk + 1, sx, true);
        }
        // sx element e: position g (e < 2) or g + 8, head 2c + (e & 1)
        const float s0 = scale(g, bk), s1 = scale(g + 8, bk);
        const float2 qv = *reinterpret_cast<const float2*>(qinv + bk * BM + 2 * c);
        const float fe[4] = {s0 * qv.x, s0 * qv.y, s1 * qv.x, s1 * qv.y};
#pragma unroll
        for (int e = 0; e < 4; ++e) sn[e] += ((sx[0][e] + sx[1][e]) + (sx[2][e] + sx[3][e])) * fe[e];
      }
      float sx[4][4];
#pragma unroll
      for (int a = 0; a < 4; ++a) sx[a][0] = sx[a][1] = sx[a][2] = sx[a][3] = 0.f;
      if constexpr (C::REG) {  // rope: bf16 at byte ROPE_OFF of the raw rows, the standard A fragments; Q rope bf16
        uint32_t b[8];
        ldsm_x4(sQ + swz(lane & 7, 64 + (lane >> 3)), b[0], b[1], b[2], b[3]);
        ldsm_x4(sQ + swz(lane & 7, 68 + (lane >> 3)), b[4], b[5], b[6], b[7]);
#pragma unroll
        for (int u = 0; u < 4; ++u) {
          uint32_t a0, a1, a2, a3;
          ldsm_x4(sK + (lane & 15) * C::RAW_ROW + C::ROPE_OFF + (2 * u + (lane >> 4)) * 16, a0, a1, a2, a3);
          mma_bf16(sx[u], a0, a1, a2, a3, b[2 * u], b[2 * u + 1]);
        }
      } else {
        s_kq(D_V / 64, sx, false);
      }
#pragma unroll
      for (int e = 0; e < 4; ++e) sv[e] = sn[e] + ((sx[0][e] + sx[1][e]) + (sx[2][e] + sx[3][e]));
    } else {
      float sx[4][4];
#pragma unroll
      for (int a = 0; a < 4; ++a) sx[a][0] = sx[a][1] = sx[a][2] = sx[a][3] = 0.f;
#pragma unroll 1
      for (int kq = 0; kq < D_QK / 64; ++kq) s_kq(kq, sx, false);
#pragma unroll
      for (int e = 0; e < 4; ++e) sv[e] = (sx[0][e] + sx[1][e]) + (sx[2][e] + sx[3][e]);
    }
    // sv: [0] (pos g, head 2c) [1] (g, 2c+1) [2] (g+8, 2c) [3] (g+8, 2c+1)
    const bool v0 = (mask >> g) & 1u, v1 = (mask >> (g + 8)) & 1u;
    sv[0] = v0 ? sv[0] * p.scale_log2 : -INFINITY;
    sv[1] = v0 ? sv[1] * p.scale_log2 : -INFINITY;
    sv[2] = v1 ? sv[2] * p.scale_log2 : -INFINITY;
    sv[3] = v1 ? sv[3] * p.scale_log2 : -INFINITY;
    // ---- online softmax per head over the warp's 16 positions (lanes of equal c) ----
    float pr[4], alpha_h[2], mx[2];
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      mx[hh] = fmaxf(sv[hh], sv[hh + 2]);
      mx[hh] = fmaxf(mx[hh], __shfl_xor_sync(0xffffffffu, mx[hh], 4));
      mx[hh] = fmaxf(mx[hh], __shfl_xor_sync(0xffffffffu, mx[hh], 8));
      mx[hh] = fmaxf(mx[hh], __shfl_xor_sync(0xffffffffu, mx[hh], 16));
    }
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      const float m_new = fmaxf(m_run[hh], mx[hh]);
      const float m_use = m_new == -INFINITY ? 0.f : m_new;
      const float alpha = exp2f(m_run[hh] - m_use);  // m_run = -inf gives 0
      m_run[hh] = m_new;
      pr[hh] = exp2f(sv[hh] - m_use);
      pr[hh + 2] = exp2f(sv[hh + 2] - m_use);
      l_run[hh] = l_run[hh] * alpha + (pr[hh] + pr[hh + 2]);
      alpha_h[hh] = alpha;
    }
    const int vrow = (lane & 7) + ((lane >> 4) & 1) * 8, vch = (lane >> 3) & 1;
    if constexpr (C::XPV) {
      // ---- publish this warp's P^T and running max; one barrier; O^T of dims [DW w, +DW) ----
      [[maybe_unused]] const int xb = warp * C::DW / 128;  // fp8: this warp's scale block
      const int buf = j & 1;  // tile j - 2's slots were read before barrier j - 1, which this warp passed
      float* pw = reinterpret_cast<float*>(smem + C::off_p) + (buf * C::WARPS + warp) * BM * C::PS;
      pw[(2 * c) * C::PS + g] = pr[0];
      pw[(2 * c + 1) * C::PS + g] = pr[1];
      pw[(2 * c) * C::PS + g + 8] = pr[2];
      pw[(2 * c + 1) * C::PS + g + 8] = pr[3];
      float* pm = reinterpret_cast<float*>(smem + C::off_pm) + buf * C::WARPS * BM;
      if (g == 0) {
        pm[warp * BM + 2 * c] = m_run[0];
        pm[warp * BM + 2 * c + 1] = m_run[1];
      }
      if constexpr (C::FP8) {  // this warp's rows' largest |scale| per block, for the consumers' sigma
        float* ps = reinterpret_cast<float*>(smem + C::off_psm) + (buf * C::WARPS + warp) * C::NBLK;
#pragma unroll
        for (int kb = 0; kb < C::NBLK; ++kb) {
          const float smax = rows_smax(kb);
          if (lane == 0) ps[kb] = smax;
        }
      }
      __syncthreads();  // every warp's tile-j P^T and max visible; every warp done with tile j - 1's PV
      if (STAGES >= 2 && j >= 1) {  // so stage (j - 1) % STAGES of every warp is free: this warp refills it
        if (j - 1 + STAGES < ntiles) issue((j - 1) % STAGES, slot_ok(j - 1 + STAGES, next_raw));
        cp_async_commit();
        const int pos = pb + (j + STAGES) * BN + warp * WR + row;
        next_raw = pos < pe ? __ldg(idx_row + pos) : -1;
      }
      // M per head over the warps (the same fmaxf order in every lane, so every warp agrees):
      // of head g for this lane's B columns, of heads 2c, 2c + 1 for its O^T columns
      float mw[C::WARPS], mg = -INFINITY;
#pragma unroll
      for (int w = 0; w < C::WARPS; ++w) {
        mw[w] = pm[w * BM + g];
        mg = fmaxf(mg, mw[w]);
      }
      const float mg_use = mg == -INFINITY ? 0.f : mg;
      float ax[2];
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) {
        float mx2 = -INFINITY;
#pragma unroll
        for (int w = 0; w < C::WARPS; ++w) mx2 = fmaxf(mx2, pm[w * BM + 2 * c + hh]);
        const float use = mx2 == -INFINITY ? 0.f : mx2;
        ax[hh] = exp2f(mx_run[hh] - use);  // mx_run = -inf gives 0 (O^T is still 0)
        mx_run[hh] = mx2;
        mx_use[hh] = use;
      }
      if constexpr (C::FP8) {  // sigma of this warp's block grows: O^T *= sigma_old / sigma_new too
        const float* ps = reinterpret_cast<const float*>(smem + C::off_psm) + buf * C::WARPS * C::NBLK + xb;
        float smx = 0.f;
#pragma unroll
        for (int w = 0; w < C::WARPS; ++w) smx = fmaxf(smx, ps[w * C::NBLK]);
        if (smx > xs) {  // warp-uniform; the division only where sigma grows (xs = 0 at first: O^T is 0)
          const float sr = xs / smx;
          ax[0] *= sr;
          ax[1] *= sr;
          xs_i = 1.f / smx;
          xs = smx;
        }
      }
#pragma unroll
      for (int i = 0; i < C::OT; ++i) {
        o_acc[i][0] *= ax[0]; o_acc[i][1] *= ax[1]; o_acc[i][2] *= ax[0]; o_acc[i][3] *= ax[1];
      }
      // one k-step per source warp w: B = its P^T (positions 2c, 2c+1 and 2c+8, 2c+9 of head g)
      // times exp2(m_w - M_g), A = V^T of its ring stage, this warp's dims
      const float* pg =
          reinterpret_cast<const float*>(smem + C::off_p) + buf * C::WARPS * BM * C::PS + g * C::PS + 2 * c;
#pragma unroll
      for (int w = 0; w < C::WARPS; ++w) {
        const float f = exp2f(mw[w] - mg_use);  // a warp with no visible position yet: 0
        const float2 lo = *reinterpret_cast<const float2*>(pg + w * BM * C::PS);
        const float2 hi = *reinterpret_cast<const float2*>(pg + w * BM * C::PS + 8);
        const uint32_t sV = smem_u32(smem + C::off_ring) + (w * STAGES + stage) * C::RAW_STAGE;
        if constexpr (C::FP8) {
          // B = P^ s[t, b] / sigma_b in f16 (|.| <= 1), the scales of rows 2c, 2c+1, 2c+8, 2c+9 from the
          // source warp's raw rows; A = V^T of segments 2 k, 2 k + 1 (n8r's REG mapping: O^T row g <->
          // dim 16 seg + 2 g, row g + 8 <-> 16 seg + 2 g + 1)
          const float* sc = reinterpret_cast<const float*>(smem + C::off_ring + (w * STAGES + stage) * C::RAW_STAGE +
                                                           C::SC_OFF) + xb;
          constexpr int RS = C::RAW_ROW / 4;  // a raw row in floats
          const float fi = f * xs_i;
          const uint32_t b0 = pack_f16(lo.x * fi * sc[(2 * c) * RS], lo.y * fi * sc[(2 * c + 1) * RS]);
          const uint32_t b1 = pack_f16(hi.x * fi * sc[(2 * c + 8) * RS], hi.y * fi * sc[(2 * c + 9) * RS]);
          const int arow = (lane & 7) + ((lane >> 3) & 1) * 8;
#pragma unroll
          for (int i = 0; i < C::OT; i += 2) {
            uint32_t r0, r1, r2, r3;
            ldsm_x4_t(sV + arow * C::RAW_ROW + (warp * C::OT + i + (lane >> 4)) * 16, r0, r1, r2, r3);
            const uint32_t t0 = __byte_perm(r0, 0, 0x3120), t1 = __byte_perm(r1, 0, 0x3120);
            const uint32_t t2 = __byte_perm(r2, 0, 0x3120), t3 = __byte_perm(r3, 0, 0x3120);
            mma_f16(o_acc[i], e4m3x2_to_f16x2(t0), e4m3x2_to_f16x2<true>(t0), e4m3x2_to_f16x2(t1),
                    e4m3x2_to_f16x2<true>(t1), b0, b1);
            mma_f16(o_acc[i + 1], e4m3x2_to_f16x2(t2), e4m3x2_to_f16x2<true>(t2), e4m3x2_to_f16x2(t3),
                    e4m3x2_to_f16x2<true>(t3), b0, b1);
          }
        } else {
          const uint32_t b0 = pack_bf16(lo.x * f, lo.y * f), b1 = pack_bf16(hi.x * f, hi.y * f);
#pragma unroll
          for (int i = 0; i < C::OT; ++i) {
            uint32_t a0, a1, a2, a3;
            ldsm_x4_t(sV + swz(vrow, 2 * (warp * C::OT + i) + vch), a0, a1, a2, a3);
            mma_bf16(o_acc[i], a0, a1, a2, a3, b0, b1);
          }
        }
      }
      if constexpr (STAGES == 1) {  // one stage: a second barrier frees it once every warp's PV(j) is done
        __syncthreads();
        if (j + 1 < ntiles) issue(0, slot_ok(j + 1, next_raw));
        cp_async_commit();
        const int pos = pb + (j + 2) * BN + warp * WR + row;
        next_raw = pos < pe ? __ldg(idx_row + pos) : -1;
      }
    } else if constexpr (C::FP8) {
      // ---- O_b^T = (alpha sigma_old / sigma_new) O_b^T + V^_b^T (P s_b / sigma_new)^T per block ----
      // REG: O^T m-tile i = segment i of 16 dims: row g <-> dim 16 i + 2 g, row g + 8 <-> 16 i + 2 g + 1.
      // ldmatrix.trans (b16) of 8 raw rows x segment i gives lane (g, c) bytes 2g, 2g+1 of rows
      // 2c and 2c+1; prmt pairs equal dims: [dim 2g: rows 2c, 2c+1 | dim 2g+1: rows 2c, 2c+1].
      const int arow = (lane & 7) + ((lane >> 3) & 1) * 8;
#pragma unroll
      for (int kb = 0; kb < C::NBLK; ++kb) {
        const int bk = kb;
        const float s0 = scale(g, bk), s1 = scale(g + 8, bk);
        const float f0 = alpha_h[0] * sig_r[kb], f1 = alpha_h[1] * sig_r[kb];
        const float e0 = s0 * sig_i[kb], e1 = s1 * sig_i[kb];
        const uint32_t pb0 = movmatrix_t(pack_f16(pr[0] * e0, pr[1] * e0));
        const uint32_t pb1 = movmatrix_t(pack_f16(pr[2] * e1, pr[3] * e1));
        auto rescale = [&](float (&o)[4]) {  // O_b^T *= f
          o[0] *= f0; o[1] *= f1; o[2] *= f0; o[3] *= f1;
        };
        if constexpr (C::REG) {
#pragma unroll
          for (int i = kb * (D_V / 64); i < (kb + 1) * (D_V / 64); i += 2) {
            uint32_t r0, r1, r2, r3;
            ldsm_x4_t(sK + arow * C::RAW_ROW + (i + (lane >> 4)) * 16, r0, r1, r2, r3);
            const uint32_t t0 = __byte_perm(r0, 0, 0x3120), t1 = __byte_perm(r1, 0, 0x3120);
            const uint32_t t2 = __byte_perm(r2, 0, 0x3120), t3 = __byte_perm(r3, 0, 0x3120);
            rescale(o_acc[i]);
            rescale(o_acc[i + 1]);
            mma_f16(o_acc[i], e4m3x2_to_f16x2(t0), e4m3x2_to_f16x2<true>(t0), e4m3x2_to_f16x2(t1),
                    e4m3x2_to_f16x2<true>(t1), pb0, pb1);
            mma_f16(o_acc[i + 1], e4m3x2_to_f16x2(t2), e4m3x2_to_f16x2<true>(t2), e4m3x2_to_f16x2(t3),
                    e4m3x2_to_f16x2<true>(t3), pb0, pb1);
          }
        } else {
#pragma unroll
          for (int i = bk * (D_V / 64); i < (bk + 1) * (D_V / 64); ++i) {
            rescale(o_acc[i]);
            uint32_t a0, a1, a2, a3;
            ldsm_x4_t(sK + swz(vrow, 2 * i + vch), a0, a1, a2, a3);
            mma_f16(o_acc[i], a0, a1, a2, a3, pb0, pb1);
          }
        }
      }
    } else {
#pragma unroll
      for (int i = 0; i < D_V / 16; ++i) {
        o_acc[i][0] *= alpha_h[0]; o_acc[i][1] *= alpha_h[1]; o_acc[i][2] *= alpha_h[0]; o_acc[i][3] *= alpha_h[1];
      }
      // P^T as the PV B operand: positions 0..7 and 8..15, transposed in registers
      const uint32_t pb0 = movmatrix_t(pack_bf16(pr[0], pr[1]));
      const uint32_t pb1 = movmatrix_t(pack_bf16(pr[2], pr[3]));
      // ---- O^T += V^T P^T: 32 m-tiles of 16 dims, one k-step of 16 positions ----
#pragma unroll
      for (int i = 0; i < D_V / 16; ++i) {
        uint32_t a0, a1, a2, a3;
        ldsm_x4_t(sK + swz(vrow, 2 * i + vch), a0, a1, a2, a3);
        mma_bf16(o_acc[i], a0, a1, a2, a3, pb0, pb1);
      }
    }
    if constexpr ((!C::FP8 || C::REG) && !C::XPV) {
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
  if constexpr (C::XPV) {
    // ---- l = sum_w l_w exp2(m_w - M) per head; each warp normalizes and writes its own dims ----
    float* pl = reinterpret_cast<float*>(smem + C::off_pl);  // [WARPS][8]
    if (g == 0) {
      pl[warp * BM + 2 * c] = l_run[0];
      pl[warp * BM + 2 * c + 1] = l_run[1];
    }
    __syncthreads();
    const float* pm = reinterpret_cast<const float*>(smem + C::off_pm) + ((ntiles - 1) & 1) * C::WARPS * BM;
    float inv[2], lse2[2];
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      float l = 0.f;
#pragma unroll
      for (int w = 0; w < C::WARPS; ++w) l += pl[w * BM + 2 * c + hh] * exp2f(pm[w * BM + 2 * c + hh] - mx_use[hh]);
      inv[hh] = l > 0.f ? 1.f / l : 0.f;
      lse2[hh] = l > 0.f ? mx_use[hh] + log2f(l) : -INFINITY;
    }
    if constexpr (C::FP8) {  // O_b^T back to its true scale: O_b = sigma_b * accumulator
      inv[0] *= xs;
      inv[1] *= xs;
    }
    // bf16: lane (g, c) holds dims d0 + g and d0 + g + 8 of heads 2c, 2c + 1; the lanes of g and g ^ 1
    // swap one value so that each writes two consecutive dims: even g (d0 + g, +1), odd g (d0 + g + 7, +8).
    // fp8 (REG mapping): it holds dims d0 + 2g and d0 + 2g + 1 already.
#pragma unroll
    for (int i = 0; i < C::OT; ++i) {
      const int d0 = 16 * (warp * C::OT + i);
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) {
        const float a = o_acc[i][hh] * inv[hh], b = o_acc[i][2 + hh] * inv[hh];
        float lo = a, hi = b;
        int d = d0 + 2 * g;
        if constexpr (!C::FP8) {
          const float recv = __shfl_xor_sync(0xffffffffu, (g & 1) ? a : b, 4);
          lo = (g & 1) ? recv : a;
          hi = (g & 1) ? b : recv;
          d = d0 + g + ((g & 1) ? 7 : 0);
        }
        const int h = h0 + 2 * c + hh;
        if (h >= p.H) continue;
        const int64_t grow = (int64_t)t * p.H + h;
        if (p.S == 1)
          *reinterpret_cast<uint32_t*>(p.o + (int64_t)t * p.o_st + (int64_t)h * p.o_sh + d) = pack_bf16(lo, hi);
        else
          part_put2(part_ptr(p.ws_o) + ((int64_t)s * rows_total + grow) * D_V + d, lo, hi);
      }
    }
    if (warp == 0 && g == 0) {
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) {
        const int h = h0 + 2 * c + hh;
        if (h >= p.H) continue;
        const int64_t grow = (int64_t)t * p.H + h;
        if (p.S > 1)
          p.ws_lse[(int64_t)s * rows_total + grow] = lse2[hh];
        else if (p.lse)
          p.lse[grow] = lse2[hh] * 0.6931471805599453f;
      }
    }
  } else {
    if constexpr (C::FP8) {  // O_b^T back to its true scale
#pragma unroll
      for (int i = 0; i < D_V / 16; ++i) {
        const float sc = sig[i / (D_V / 64)];  // local block
        o_acc[i][0] *= sc; o_acc[i][1] *= sc; o_acc[i][2] *= sc; o_acc[i][3] *= sc;
      }
    }
    // the warp's O^T into a merge row block at `ow`
    auto store_o = [&](float* ow) {
      if constexpr (C::REG) {  // O^T rows of m-tile i: dims 16 i + 2 g and 16 i + 2 g + 1
#pragma unroll
        for (int i = 0; i < D_V / 16; ++i) {
          ow[(2 * c) * C::PSTR + 16 * i + 2 * g] = o_acc[i][0];
          ow[(2 * c + 1) * C::PSTR + 16 * i + 2 * g] = o_acc[i][1];
          ow[(2 * c) * C::PSTR + 16 * i + 2 * g + 1] = o_acc[i][2];
          ow[(2 * c + 1) * C::PSTR + 16 * i + 2 * g + 1] = o_acc[i][3];
        }
      } else {
#pragma unroll
        for (int i = 0; i < D_V / 16; ++i) {
          ow[(2 * c) * C::PSTR + 16 * i + g] = o_acc[i][0];
          ow[(2 * c + 1) * C::PSTR + 16 * i + g] = o_acc[i][1];
          ow[(2 * c) * C::PSTR + 16 * i + g + 8] = o_acc[i][2];
          ow[(2 * c + 1) * C::PSTR + 16 * i + g + 8] = o_acc[i][3];
        }
      }
    };
    // one (head row r, dims d..d+3) unit merged: normalize by l, write out (S == 1) or the partial
    auto write_unit = [&](int h, int d, float4 acc, float l, float mref) {
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
        part_t* dst = part_ptr(p.ws_o) + ((int64_t)s * rows_total + grow) * D_V + d;
        part_put4(dst, make_float4(acc.x * inv, acc.y * inv, acc.z * inv, acc.w * inv));
        if (d == 0) p.ws_lse[(int64_t)s * rows_total + grow] = lse2;
      }
    };
    __syncthreads();  // every warp done with its ring: it becomes the merge space
    if constexpr (C::MERGE_ROUNDS == 1) {
      float* mo = reinterpret_cast<float*>(smem + C::off_ring);  // [WARPS][8][PSTR]
      float* mm = mo + C::WARPS * BM * C::PSTR;                  // [WARPS][8] max (log2 units)
      float* ml = mm + C::WARPS * BM;                            // [WARPS][8] sum
      store_o(mo + warp * BM * C::PSTR);
      if (g == 0) {
        mm[warp * BM + 2 * c] = m_run[0];
        mm[warp * BM + 2 * c + 1] = m_run[1];
        ml[warp * BM + 2 * c] = l_run[0];
        ml[warp * BM + 2 * c + 1] = l_run[1];
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
        write_unit(h, d, acc, l, mref);
      }
    } else {
      // The drained ring holds only MERGE_CAP warps' O^T: m, l of every warp first, then the warps'
      // O^T in rounds of MERGE_CAP, each unit accumulated in registers in the same warp order (the
      // same sums as one round). The merge space starts at Q (drained too).
      float* mm = reinterpret_cast<float*>(smem);  // [WARPS][8] max (log2 units)
      float* ml = mm + C::WARPS * BM;              // [WARPS][8] sum
      float* mo = ml + C::WARPS * BM;              // [MERGE_CAP][8][PSTR]
      constexpr int UNITS = BM * (D_V / 4), UPT = (UNITS + C::THREADS - 1) / C::THREADS;
      if (g == 0) {
        mm[warp * BM + 2 * c] = m_run[0];
        mm[warp * BM + 2 * c + 1] = m_run[1];
        ml[warp * BM + 2 * c] = l_run[0];
        ml[warp * BM + 2 * c + 1] = l_run[1];
      }
      float4 acc[UPT];
      float lsum[UPT], mref[UPT];
#pragma unroll
      for (int k = 0; k < UPT; ++k) {
        acc[k] = make_float4(0.f, 0.f, 0.f, 0.f);
        lsum[k] = 0.f;
        mref[k] = 0.f;
      }
#pragma unroll 1
      for (int rd = 0; rd < C::MERGE_ROUNDS; ++rd) {
        const int w0 = rd * C::MERGE_CAP, w1 = min(C::WARPS, w0 + C::MERGE_CAP);
        if (warp >= w0 && warp < w1) store_o(mo + (warp - w0) * BM * C::PSTR);
        __syncthreads();
#pragma unroll
        for (int k = 0; k < UPT; ++k) {
          const int u = tid + k * C::THREADS;
          const int r = u / (D_V / 4), d = (u % (D_V / 4)) * 4;
          if (u >= UNITS || h0 + r >= p.H) continue;
          if (rd == 0) {
            float mx = -INFINITY;
            for (int w = 0; w < C::WARPS; ++w) mx = fmaxf(mx, mm[w * BM + r]);
            mref[k] = mx == -INFINITY ? 0.f : mx;
          }
          for (int w = w0; w < w1; ++w) {
            const float wt = exp2f(mm[w * BM + r] - mref[k]);  // an empty warp: exp2(-inf) = 0, its O is 0
            const float4 v = *reinterpret_cast<const float4*>(mo + ((w - w0) * BM + r) * C::PSTR + d);
            acc[k].x += wt * v.x;
            acc[k].y += wt * v.y;
            acc[k].z += wt * v.z;
            acc[k].w += wt * v.w;
            lsum[k] += wt * ml[w * BM + r];
          }
        }
        __syncthreads();  // this round's slots read before the next round writes them
      }
#pragma unroll
      for (int k = 0; k < UPT; ++k) {
        const int u = tid + k * C::THREADS;
        const int r = u / (D_V / 4), d = (u % (D_V / 4)) * 4;
        if (u < UNITS && h0 + r < p.H) write_unit(h0 + r, d, acc[k], lsum[k], mref[k]);
      }
    }
  }
  DSAV_SPLIT_STAMP(4, dsav_now());
}

}  // namespace dsav
