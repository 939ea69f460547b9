// sm_90a split kernel for the fp8 e4m3 cache, warp-specialized (session 43): the bf16 warp-specialized kernel's
// layout and handoffs (mla_verify_wgmma_ws.cuh: Q, two KV stages, P, the full / empty mbarriers) with the F16
// kernel's arithmetic (mla_verify_wgmma.cuh, F16 = true): Q rewritten per row as f16 of q x 2^e, the prefix tiles'
// rows as f16 (one exact cvt.rn.f16x2.e4m3x2 per two values), their wgmmas f16, P written in f16 times v_scale; the
// draft tiles (bf16 rows from k_extend) run in bf16 after Q is converted back. Launched for the f16 arithmetic where a
// split holds >= tiles.TileConfig.fp8_ws_min_tokens prefix tokens (p.fp8_f16 = 2; api.fp8_f16, mla_verify.cu), with
// the ASYM consumers since session 44 (0.93-0.96 of the token-split consumers' time on every long-split row;
// mla_verify.cu says where measured). The token-split (MODE 0) consumers of session 43 ran the F16 kernel's tiles,
// wgmmas and order, so their outputs were that kernel's bit for bit; ASYM's softmax sees a tile's 64 columns at once,
// so its outputs differ in the last bits (parity: within the oracle's bound, token-exact).
// Why: the fp8 kernels load and convert inside the consumers' loop (register loads of tile j+1 issued around S(j),
// stored under PV(j)), and on the memory-floored shape (4, 131072, 4, 16) the fp8 cache ran at 1.01x the bf16 time
// (session 43 call 1, H100, the graph's bf16 decode; 0.95x eager on the F16 kernel) where the bytes are half.
// Measured in its first form (session 43 call 2, H100, MODE 0 consumers, over the F16 kernel, bitwise equal): 0.918
// at (4, 131072, 4, 16), 0.925 at (8, 32768, 8, 16), 0.924 at (32, 8192, 8, 16) (~4,000 tokens per split), 1.121 at
// B=1 L=32k (512), 1.083 at B=1 L=4k (64): over few tiles the prologue (Q copy, Q conversion, tile 0 conversion in
// series) shows.
// Producer (warpgroup 2; 96 registers after setmaxnreg: at 88 / 176 ptxas spilled 12 B): Q's bf16 rows by cp.async,
// then Q rewritten as f16 in place while tiles 0 and 1 fly (each row's 72 chunks held by 8 lanes: no barrier); it
// issues prefix tiles 0 and 1 and every draft tile; per prefix tile it waits for the raw rows' landing (raw_full),
// converts them into the f16 tile the wgmmas read and arrives on full. Prefix tiles 2.. are issued by the V warpgroup
// (fp8_raw_off, below). There is no room for a separate raw ring (the kernel asks for 231,808 of the 232,448 B a CTA
// may have), so the raw rows land in bytes of the tile's own stage that the S warpgroup alone reads, plus a slice of
// the P atom, and the conversion writes the f16 tile around them.
// Consumers (warpgroups 0 and 1): ASYM (ws_fp8_asym_consumers: S 240 registers, V 168), f16 tiles first, then the draft
// tiles in bf16 (two loops: ptxas serializes every wgmma behind a branch between the two arithmetics, C7520). Where the
// time goes: at (4, 131072, 4, 16) Nsight Compute put DRAM at 53% and the tensor pipe at 44%, 53% of the warps'
// cycles in long-scoreboard stalls (session 44). Traced (session 45, H100, SM cycles per tile): the producer set the
// time. Its landing wait plus conversion of a tile was 4,078 cycles and it waited 177 for a free stage; with no gather
// (-DMLAV_DIAG_NOLOAD=1) the conversion alone was 2,363, it waited 1,275 for a stage and the kernel took 0.83 of the
// time. A tile was issued only once the PV two tiles back was done and waited for right after, so its DRAM trip
// (~1,700) was paid per tile in series with its conversion. A single f16 stage with a two-slot raw ring (tiles issued
// two ahead; docs/results/session44_calls/ring_fp8.patch) ran 1.19x slower: the conversion then waits on the
// consumers. Session 46 shortened the conversion to 3 phases with 2 producer barriers (0.966-1.000 of the 5-phase
// time); issuing the next tile between its phases was slower. Session 47 moved the issue of prefix tiles 2.. to the V
// warpgroup at the S warpgroup's s_done (0.95-0.998 of session 46's time, fp8_raw_off below), and the conversion to
// one barrier (1,586 cycles a tile); by its trace the producer now waits ~2,400 cycles a tile for the raw rows'
// landing (36.9 KB per tile and SM: ~3,200 cycles of the SM's share of the 3.05 TB/s copy rate bench measured).
// Trace build (-DMLAV_TRACE=1): the consumers' slots as the bf16 kernel's ASYM ones (the S warpgroup in row 0, the V
// warpgroup in row 1); the producer's slot 0 its prologue up to tiles 0 and 1 issued, slot 3 its wait for Q's rows,
// slot 4 Q's conversion, slot 5 its wait for tile 0's rows; per prefix tile slot 1 its wait for the raw rows' landing,
// slot 6 its wait for the stage's tile t - 2, slot 2 the conversion (and a draft tile's issue after its wait for a
// free stage, slot 1); slot 7 its wait for its last copies.
#pragma once
#include "mla_verify_wgmma_ws.cuh"

namespace mlav {
namespace wg {

// Raw fp8 rows of a prefix tile (session 47): tile t + 2's rows are issued by the V warpgroup as soon as the S
// warpgroup is done with tile t (s_done), into the bytes of the stage only the S warpgroup reads (atoms 0-3: dims
// 0..255, its QK and its PV half) and the stage's 4 KiB slice of the P atom (unused by this kernel's consumers, whose
// P lies in atom 8 of the stage). The producer converts them once they have landed (raw_full) and tile t's V
// warpgroup is done too (empty). So a tile's DRAM trip starts while the V warpgroup still runs tile t's PV and the
// producer converts tile t + 1, where the producer of sessions 43-46 issued a tile after converting the previous
// one and then waited for its landing. Measured (session 47, H100, fp8 cache, f16 arithmetic, one process; calls 2
// and 4 in docs/results/session47_calls/), over the session-46 kernel: 0.982-0.989 at (4, 131072, 4, 16), 0.997-0.998
// at (8, 32768, 8, 16), 0.950-0.970 at (4, 65536, 4, 64), 0.985 at (1, 131072, 8, 16), 0.995 at (32, 8192, 8, 16).
// Raw dims block b (64 rows x 64 B) of a stage: b < 8 at fp8_raw_off(b) in atoms 0-3, block 8 (the rope dims) at
// the stage's P-atom slice; row r's 64 bytes at r * 64 within. The conversion writes atoms 4-8 first (no raw bytes
// there), then, behind one producer barrier, atoms 0-3.
__device__ __forceinline__ constexpr uint32_t fp8_raw_off(int b) {
  return (uint32_t)((b >> 1) * ATOM + (b & 1) * 4096);
}

// The fp8 rows of a thread (producer or V warpgroup): 4 lanes per row, rows pr and pr + 32 of a tile; lane sub4
// copies the row's 16-byte pieces sub4 + 4 b (b < 9: dims block b) and converts them into f16 chunks 2 sub4,
// 2 sub4 + 1 of atom b.
struct Fp8Rows {
  int pr, sub4;
  __device__ __forceinline__ explicit Fp8Rows(int pt) : pr(pt >> 2), sub4(pt & 3) {}
};

// Prefix tile j's fp8 rows of this thread into stage sT and its P-atom slice sR; slot8 holds their ids on entry and
// tile jn's on return. A row that must not be read copies 0 bytes (its raw bytes zero-filled: the f16 tile gets +0,
// as the F16 kernel's store).
__device__ __forceinline__ void ws_issue_fp8(const Params& p, const Work& w, const Fp8Rows& r, uint32_t sT, uint32_t sR,
                                             int j, int jn, int64_t (&slot8)[2]) {
#ifdef MLAV_DIAG_NOLOAD
  // Timing diagnostic, never in a shipped build (as ws_issue_tile's): no fp8 rows from tile 2 on; the producer still
  // converts what its stage holds and arrives, so a timing shows the kernel without the gather; the output is wrong.
  if (MLAV_DIAG_NOLOAD && j >= 2) return;
#endif
#pragma unroll
  for (int k = 0; k < 2; ++k) {
    const int row = r.pr + 32 * k;
    const int64_t slot = slot8[k];
    const bool ok = slot >= 0 && slot < p.num_slots;
    const uint8_t* src = p.kbuf8 + (ok ? slot : 0) * p.kb_st + r.sub4 * 16;
    slot8[k] = tile_slot(p, w, jn, BN, row);
#pragma unroll
    for (int b = 0; b < 8; ++b) cp_async16(sT + fp8_raw_off(b) + row * 64 + r.sub4 * 16, src + b * 64, ok ? 16 : 0);
    cp_async16(sR + row * 64 + r.sub4 * 16, src + 8 * 64, ok ? 16 : 0);
  }
}

__device__ __forceinline__ void producer_sync() { asm volatile("bar.sync 3, 128;\n" ::: "memory"); }

// Dims block b of this thread's two rows: 16 raw bytes each -> two f16 chunks of atom b (uint4 raw[k] given).
__device__ __forceinline__ void fp8_store_block(uint32_t sT, const Fp8Rows& r, int b, const uint4 (&raw)[2]) {
#pragma unroll
  for (int k = 0; k < 2; ++k) {
    const int row = r.pr + 32 * k;
    st_shared_v4(sT + tile_off(row, 8 * b + 2 * r.sub4), fp8x8_to_f16x8(raw[k].x, raw[k].y));
    st_shared_v4(sT + tile_off(row, 8 * b + 2 * r.sub4 + 1), fp8x8_to_f16x8(raw[k].z, raw[k].w));
  }
}
// Raw dims block b of this thread's two rows (tile: the stage's bytes, rope: its P-atom slice).
__device__ __forceinline__ void fp8_load_block(const uint8_t* tile, const uint8_t* rope, const Fp8Rows& r, int b,
                                               uint4 (&raw)[2]) {
  const uint8_t* base = b < 8 ? tile + fp8_raw_off(b) : rope;
#pragma unroll
  for (int k = 0; k < 2; ++k) raw[k] = *reinterpret_cast<const uint4*>(base + (r.pr + 32 * k) * 64 + r.sub4 * 16);
}
// The stage's raw rows (landed: raw_full) converted into the f16 tile; atoms 4-8 must be free (tile t - 2 done).
// Each thread converts only raw bytes whose landing raw_full made visible; the barrier keeps a thread from writing
// atoms 0-3 while another still reads raw bytes there. Blocks 4-8 go in two groups of registers (all five at once
// spilled 12 B at the producer's 96 registers).
__device__ __forceinline__ void fp8_convert_tile(uint32_t sT, const uint8_t* tile, const uint8_t* rope,
                                                 const Fp8Rows& r) {
  {
    uint4 hi[3][2];
#pragma unroll
    for (int b = 0; b < 3; ++b) fp8_load_block(tile, rope, r, 4 + b, hi[b]);
#pragma unroll
    for (int b = 0; b < 3; ++b) fp8_store_block(sT, r, 4 + b, hi[b]);
#pragma unroll
    for (int b = 0; b < 2; ++b) fp8_load_block(tile, rope, r, 7 + b, hi[b]);
#pragma unroll
    for (int b = 0; b < 2; ++b) fp8_store_block(sT, r, 7 + b, hi[b]);
  }
  uint4 lo[4][2];
#pragma unroll
  for (int b = 0; b < 4; ++b) fp8_load_block(tile, rope, r, b, lo[b]);
  producer_sync();  // every thread's raw bytes in atoms 0-3 read
#pragma unroll
  for (int b = 0; b < 4; ++b) fp8_store_block(sT, r, b, lo[b]);
}

// Q's rows of this producer thread (WsRows: rows l8 + 16 i, chunks sub8 + 8 it) rewritten as f16 in place, as
// q_to_f16 does (the same scale and rounding: bitwise its result), in two passes over smem (the max, then the
// conversion) to stay within the producer's registers; qinv[r] = 2^-e[r].
__device__ __forceinline__ void ws_q_to_f16(uint8_t* q, const WsRows& r, float* qinv) {
#pragma unroll 1
  for (int i = 0; i < 4; ++i) {
    const uint32_t off = r.off0 + i * 16 * 128;
    float mx = 0.f;
#pragma unroll
    for (int it = 0; it < 9; ++it) mx = bf16x8_absmax(*reinterpret_cast<const uint4*>(q + it * ATOM + off), mx);
#pragma unroll
    for (int o = 4; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
    const int e = q_f16_exp(mx);
    const float sc = __int_as_float((127 + e) << 23);
#pragma unroll
    for (int it = 0; it < 9; ++it) {
      uint4* ptr = reinterpret_cast<uint4*>(q + it * ATOM + off);
      *ptr = bf16x8_to_f16x8_scaled(*ptr, sc);
    }
    if (r.sub8 == 0) qinv[r.l8 + 16 * i] = __int_as_float((127 - e) << 23);
  }
}

// The fp8 kernel's mbarriers (shared-memory addresses from bar0 = base + Smem::used; WS_FP8_SMEM_BYTES has room
// for them at any base; the P atom, where the bf16 kernel keeps ASYM's, holds raw rope bytes here): full / empty per
// stage, ASYM's p_full / a_free per stage and fin, s_done (the S warpgroup done with a stage's tile, where the V
// warpgroup issues a tile into it) and raw_full (a stage's raw rows landed). m_fin (the final m_run, [BM] floats)
// follows them.
constexpr int WS_FP8_BAR_BYTES = 128 + BM * 4;  // 13 mbarriers (104 B) and m_fin, after the layout
// Dynamic smem the launcher requests: the layout, its 1 KiB alignment slack and the barriers, so they fit at any base.
constexpr int WS_FP8_SMEM_BYTES = Smem::bytes + WS_FP8_BAR_BYTES;  // 231,808 B
static_assert(WS_FP8_SMEM_BYTES <= 232448, "the fp8 kernel's smem exceeds the 227 KiB a CTA may have on sm_90");
struct Fp8Bars {
  uint32_t bar0;
  __device__ __forceinline__ uint32_t full(int st) const { return bar0 + 8u * st; }
  __device__ __forceinline__ uint32_t empty(int st) const { return bar0 + 16u + 8u * st; }
  __device__ __forceinline__ uint32_t p_full(int st) const { return bar0 + 32u + 8u * st; }
  __device__ __forceinline__ uint32_t a_free(int st) const { return bar0 + 48u + 8u * st; }
  __device__ __forceinline__ uint32_t fin() const { return bar0 + 64u; }
  __device__ __forceinline__ uint32_t s_done(int st) const { return bar0 + 72u + 8u * st; }
  __device__ __forceinline__ uint32_t raw_full(int st) const { return bar0 + 88u + 8u * st; }
  static constexpr int m_fin_off = Smem::used + 128;  // bytes from the base
};

// ASYM consumers of the fp8 kernel (shipped, session 44): the bf16 kernel's ASYM loop (mla_verify_wgmma_ws.cuh) per
// tile, f16 on the prefix tiles (Q f16, P f16 x v_scale), bf16 on the draft tiles after the S warpgroup converts Q back
// (only it reads Q). Two loops per warpgroup (C7520).
__device__ __forceinline__ void ws_fp8_asym_consumers(const Params& p, const Work& w, int s, uint8_t* smem, uint32_t sQ,
                                                      uint32_t sKV, uint32_t sP, uint32_t bar0, float* red_max,
                                                      float* red_sum, int tid, int grp, int wq, int lane,
                                                      PhaseTrace& tr) {
  const Fp8Bars bars{bar0};
  float* alpha_buf = red_max;                                         // [2][BM]: tile j's row rescale at (j & 1) BM
  float* m_fin = reinterpret_cast<float*>(smem + Fp8Bars::m_fin_off);  // [BM]: the final m_run
  const int r0 = wq * 16 + (lane >> 2);                               // tile rows of this thread: r0 and r0 + 8
  const float sl_pre = p.scale_log2 * p.k_scale, vs_pre = p.v_scale;  // the fp8 prefix's scales
  float o[128];
  if (grp == 0) {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 240;\n" ::: "memory");
#pragma unroll
    for (int i = 0; i < 128; ++i) o[i] = 0.f;
    float m_run[2] = {-INFINITY, -INFINITY};
    float l_run[2][2] = {{0.f, 0.f}, {0.f, 0.f}};  // [32-token half][row h]
    int tok_row[2];
    draft_token_rows(p, w, r0, tok_row);
    const int64_t mask_base = p.mask_mode == 0 ? ld_idx(p.mask_indptr, p.mi_is64, blockIdx.z) : 0;
    float sl_row[2] = {sl_pre, sl_pre};
    tr.mark(0);
    auto s_step = [&](int j, auto f16_tag) {
      constexpr bool f16 = decltype(f16_tag)::value;
      mbar_wait(bars.full(j & 1), (j >> 1) & 1);  // tile j (and Q, qinv) ready
      fence_proxy_async();
      tr.mark(1);
      const bool draft = j >= w.n_pre;
      if constexpr (f16) {
        if (j == 0) {
#pragma unroll
          for (int h = 0; h < 2; ++h) sl_row[h] = sl_pre * red_sum[r0 + 8 * h];
        }
      } else {
        if (j == w.n_pre && j > 0) {  // Q back to bf16 (this warpgroup's S reads of the f16 Q have completed)
          const WsRows rs(tid);
#pragma unroll 1
          for (int i = 0; i < 4; ++i)
            q_row_to_bf16<9, 3>(
                smem + Smem::off_q, [&](int it) { return it * ATOM + rs.off0 + i * 16 * 128; },
                red_sum[rs.l8 + 16 * i]);
          fence_proxy_async();
          s_group_sync_or(false);  // every S thread's Q rows rewritten
        }
      }
      const uint32_t sK = sKV + (j & 1) * TILE, sPj = sK + 8 * ATOM;
      uint8_t* pPj = smem + Smem::off_kv + (j & 1) * TILE + 8 * ATOM;
      const float vs = draft ? 1.f : vs_pre;
      float sc[32];
      wgmma_fence();
      issue_qk64<f16>(sc, sQ, sK);
      wgmma_finish<32>(sc);
      tr.mark(2);
      float sh[2][16], alpha[2] = {1.f, 1.f};  // S's two 32-token halves; tile j's row rescale
      const bool exact_step = asym_scale_vote(sc, sh, m_run, alpha, p, w, j, sl_row, tok_row, mask_base, lane, tr);
      if (draft && !p.v_alias) {
        load_draft_v(p, w, j, sK, tid >> 2, tid & 3);
        load_draft_v(p, w, j, sK, (tid >> 2) + 32, tid & 3);
      }
      if (j >= 2) mbar_wait(bars.a_free(j & 1), ((j >> 1) + 1) & 1);
      if ((lane & 3) == 0) {
        alpha_buf[(j & 1) * BM + r0] = alpha[0];
        alpha_buf[(j & 1) * BM + r0 + 8] = alpha[1];
      }
      if (exact_step) rescale_o(o, alpha);
      {
        float psum[2];
        write_p<f16>(pPj, sh[0], m_run, psum, 0, r0, lane, vs);
#pragma unroll
        for (int h = 0; h < 2; ++h) l_run[0][h] = exact_step ? l_run[0][h] * alpha[h] + psum[h] : l_run[0][h] + psum[h];
      }
      if (draft && !p.v_alias) cp_async_wait<0>();
      fence_proxy_async();
      tr.mark(5);
      fence_regs<128>(o);
      wgmma_fence();
      issue_pv_steps<0, 2, f16>(o, sPj, sK, 0);
      wgmma_commit();
      {
        float psum[2];
        write_p<f16>(pPj, sh[1], m_run, psum, 1, r0, lane, vs);
#pragma unroll
        for (int h = 0; h < 2; ++h) l_run[1][h] = exact_step ? l_run[1][h] * alpha[h] + psum[h] : l_run[1][h] + psum[h];
      }
      fence_proxy_async();
      mbar_arrive(bars.p_full(j & 1));
      wgmma_fence();
      issue_pv_steps<2, 2, f16>(o, sPj, sK, 0);
      wgmma_finish<128>(o);
      mbar_arrive(bars.empty(j & 1));
      if (f16 && j + 2 < w.n_pre) mbar_arrive(bars.s_done(j & 1));  // atoms 0-3 free for tile j + 2's raw rows
      tr.mark(6);
    };
    int j = 0;
    for (; j < w.n_pre; ++j) s_step(j, std::true_type{});
    for (; j < w.ntiles; ++j) s_step(j, std::false_type{});
    publish_row_sums(l_run[0], red_sum, 0, r0, lane);
    publish_row_sums(l_run[1], red_sum, 1, r0, lane);
    if ((lane & 3) == 0) {
      m_fin[r0] = m_run[0];
      m_fin[r0 + 8] = m_run[1];
    }
  } else {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 168;\n" ::: "memory");
#pragma unroll
    for (int i = 0; i < 128; ++i) o[i] = 0.f;
    const Fp8Rows r8(tid & 127);  // this warpgroup issues prefix tiles 2..
    int64_t slot8[2] = {tile_slot(p, w, 2, BN, r8.pr), tile_slot(p, w, 2, BN, r8.pr + 32)};
    tr.mark(0);
    auto v_step = [&](int j, auto f16_tag) {
      constexpr bool f16 = decltype(f16_tag)::value;
      mbar_wait(bars.p_full(j & 1), (j >> 1) & 1);
      mbar_wait(bars.full(j & 1), (j >> 1) & 1);
      fence_proxy_async();
      tr.mark(1);
      const uint32_t sK = sKV + (j & 1) * TILE;
      const float alpha[2] = {alpha_buf[(j & 1) * BM + r0], alpha_buf[(j & 1) * BM + r0 + 8]};
      mbar_arrive(bars.a_free(j & 1));
      rescale_o(o, alpha);
      fence_regs<128>(o);
      wgmma_fence();
      issue_pv<f16>(o, sK + 8 * ATOM, sK, 1);
      wgmma_commit();  // before the branch: behind it ptxas injects a warpgroup.arrive (C7519)
      if (f16 && j + 2 < w.n_pre) {  // tile j + 2's raw rows, once the S warpgroup is done with tile j
        mbar_wait(bars.s_done(j & 1), (j >> 1) & 1);
        ws_issue_fp8(p, w, r8, sK, sP + (j & 1) * 4096u, j + 2, j + 3, slot8);
        mbar_arrive_on_copies(bars.raw_full(j & 1));
      }
      wgmma_wait0();
      fence_regs<128>(o);
      mbar_arrive(bars.empty(j & 1));
      tr.mark(6);
    };
    int j = 0;
    for (; j < w.n_pre; ++j) v_step(j, std::true_type{});
    for (; j < w.ntiles; ++j) v_step(j, std::false_type{});
  }
  if (grp == 0) mbar_arrive(bars.fin());
  mbar_wait(bars.fin(), 0);
  const float m_run[2] = {m_fin[r0], m_fin[r0 + 8]};
  write_rows(p, w, s, o, m_run, red_sum, grp, r0, lane);
  tr.mark(7);
  tr.flush(tid, grp, w.ntiles);
}

// GATED: the instance a gated pair launches (p.fp8_gate; mla_verify.cu), a separate one so that the plain instance's
// machine code carries no gate.
template <bool GATED = false>
__global__ void __launch_bounds__(WS_THREADS, 1) mla_verify_split_wgmma_ws_fp8_kernel(const Params p) {
  extern __shared__ __align__(1024) uint8_t smem_raw[];
  const uint32_t raw = smem_u32(smem_raw);
  const uint32_t base = (raw + 1023u) & ~1023u;
  uint8_t* smem = smem_raw + (base - raw);
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int grp = warp >> 2, wq = warp & 3;  // warpgroup (2: producer), warp within it
  const int s = blockIdx.y;
  PhaseTrace tr;
  pdl_signal(p);
  const Work w = warp_uniform(work_of(p, blockIdx.x, s, blockIdx.z, BM, BN, GATED));
  if (GATED) fp8_gate_order(p, w.row0 >= w.R);
  if (w.row0 >= w.R) return;
  float* red_max = reinterpret_cast<float*>(smem + Smem::off_red);  // [2][BM]
  float* red_sum = red_max + 2 * BM;                                // [2][BM]; [0, BM) holds qinv until the finalize
  if (w.ntiles == 0) {
    write_empty_split(p, w, s, tid, WS_THREADS);
    if (GATED) fp8_gate_order_end(p);
    return;
  }
  const uint32_t sQ = base + Smem::off_q, sKV = base + Smem::off_kv, sP = base + Smem::off_p;
  const uint32_t bar0 = base + Smem::used;
  const Fp8Bars bars{bar0};
  if (tid == 0) {
    mbar_init(bars.full(0), 128);
    mbar_init(bars.full(1), 128);
    mbar_init(bars.empty(0), WS_CONSUMERS);
    mbar_init(bars.empty(1), WS_CONSUMERS);
    for (int st = 0; st < 2; ++st) {
      mbar_init(bars.p_full(st), 128);
      mbar_init(bars.a_free(st), 128);
      mbar_init(bars.s_done(st), 128);
      mbar_init(bars.raw_full(st), 128);
    }
    mbar_init(bars.fin(), 128);
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();

  if (grp == 2) {  // ---- producer ----
    asm volatile("setmaxnreg.dec.sync.aligned.u32 96;\n" ::: "memory");  // 240 + 168 + 96 = 504 per thread slot
    const int pt = tid - WS_CONSUMERS;
    const WsRows rq(pt);   // Q and the bf16 draft tiles: 8 lanes per row
    const Fp8Rows r8(pt);  // fp8 prefix tiles: 4 lanes per row
    int64_t slot[4] = {-1, -1, -1, -1};  // ws_issue_tile's next slot ids (a draft tile's: unused)
    int64_t slot8[2] = {tile_slot(p, w, 0, BN, r8.pr), tile_slot(p, w, 0, BN, r8.pr + 32)};
    // Tile t into stage t & 1: fp8 rows (prefix tiles 0 and 1; converted once raw_full completes) or, for a draft
    // tile, bf16 rows whose landing arrives on full by itself. One cp.async group per tile.
    auto issue = [&](int t) {
      if (t < w.n_pre) {
        ws_issue_fp8(p, w, r8, sKV + (t & 1) * TILE, sP + (t & 1) * 4096u, t, t + 1, slot8);
        mbar_arrive_on_copies(bars.raw_full(t & 1));
      } else {
        ws_issue_tile(p, w, rq, sKV, t, slot);
        mbar_arrive_on_copies(bars.full(t & 1));
      }
      cp_async_commit();
    };
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      bool ok;
      copy_row8(sQ, rq.off0 + i * 16 * 128, q_src(p, w, rq.l8 + 16 * i, ok), rq.sub8, ok);
    }
    cp_async_commit();
    issue(0);
    if (w.ntiles > 1) issue(1);  // stage 1 is free: tile 1 flies while tile 0 is converted
    tr.mark(0);
    if (w.n_pre > 0) {
      if (w.ntiles > 1)
        cp_async_wait<2>();  // this thread's Q chunks landed (tiles 0 and 1 still in flight)
      else
        cp_async_wait<1>();
      tr.mark(3);
      ws_q_to_f16(smem + Smem::off_q, rq, red_sum);
    }
    tr.mark(4);
    // prefix tiles 2.. are issued by the V warpgroup; the producer converts each once it landed and the stage's
    // tile t - 2 is done, and issues the draft tiles (bf16 rows) once their stage is free
    for (int t = 0; t < w.ntiles; ++t) {
      if (t < w.n_pre) {
        mbar_wait(bars.raw_full(t & 1), (t >> 1) & 1);
        if (t == 0)
          tr.mark(5);
        else
          tr.mark(1);
        if (t >= 2) mbar_wait(bars.empty(t & 1), ((t >> 1) + 1) & 1);
        tr.mark(6);
        fp8_convert_tile(sKV + (t & 1) * TILE, smem + Smem::off_kv + (t & 1) * TILE,
                         smem + Smem::off_p + (t & 1) * 4096, r8);
        fence_proxy_async();
        mbar_arrive(bars.full(t & 1));
      }
      tr.mark(2);
      if (t >= 1 && t + 1 < w.ntiles && t + 1 >= w.n_pre) {
        mbar_wait(bars.empty((t + 1) & 1), (((t + 1) >> 1) + 1) & 1);
        tr.mark(1);
        issue(t + 1);
      }
    }
    cp_async_wait<0>();  // no copy outlives its thread
    if (GATED) fp8_gate_order_end(p);
    tr.mark(7);
    tr.flush(tid, grp, w.ntiles);
    return;
  }

  ws_fp8_asym_consumers(p, w, s, smem, sQ, sKV, sP, bar0, red_max, red_sum, tid, grp, wq, lane, tr);
}

}  // namespace wg
}  // namespace mlav
