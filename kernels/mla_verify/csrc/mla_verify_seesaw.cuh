// sm_90a "seesaw" split kernel of the MLA verify attention (tile config sm90ss, cfg 3): the two
// warpgroups take alternate KV tiles for S = Q K^T and hand their P to each other, so one
// warpgroup's softmax runs while the other's wgmma keeps the tensor cores busy (the schedule
// FlashMLA's dense decode uses on Hopper; this is our own implementation for SGLang's page_size 1
// gather, drafts and split-K partials).
//
// CTA = 2 warpgroups (256 threads), BM = 64 packed rows, BN = 32 KV tokens, tiles processed in pairs
// (a = 2i, b = 2i + 1) over four KV stages: pair i uses stages 2 (i % 2) (a) and 2 (i % 2) + 1 (b),
// so the loads of pair i + 2 go out while pair i + 1 computes (a whole pair of lead time; with two
// 64-token stages the loads were issued too late: docs/kernels/dense-verify-notes.md, session 9).
// Shared memory (from a 1024-byte aligned base): Q [64 x 576] in wg::'s 128B-swizzled layout (9
// atoms of 64 rows x 64 dims, 8 KiB), four KV stages [32 x 576] in the same layout with 4 KiB atoms
// (atom 8 = rope), fp32 row state sM / sScale0 / sScale1 [64] and sL [2][64], eight mbarriers.
// Output columns are split: warpgroup 0 owns O[:, 0:256) (O_L), warpgroup 1 O[:, 256:512) (O_R), 128
// fp32 registers per thread each. Per pair (m = running row max, log2 domain):
//   WG0: S_a = Q K_a^T (m64n32k576); m0 = max(m, rowmax S_a); O_L *= 2^(m - m0); P_a = 2^(S_a - m0);
//        O_L += P_a V_a[:, 0:256) (P_a from registers) | WG1 meanwhile: S_b, then
//   WG1: m1 = max(m0, rowmax S_b); O_R *= 2^(m - m1); P_b = 2^(S_b - m1); P_b -> sP1 (b's atom 8);
//        O_R += P_b V_b[:, 256:512) (registers), O_R += sP0 V_a[:, 256:512)
//   WG0: sP0 = P_a * 2^(m0 - m1) (a's atom 8: K_a's rope, dead after S_a); O_L *= 2^(m0 - m1);
//        O_L += sP1 V_b[:, 0:256)
// so both halves end the pair at m1. P in smem is [64 x 32] bf16 in the 64B-swizzled K-major layout
// (64 B per row: exactly one 4 KiB rope atom). Four named barriers order the exchanges (SCALE0,
// SCALE1, P0READY, P1READY: 128 threads arrive, 128 sync). Every tile is read by one warpgroup in S
// and by both in PV, so a stage is reloaded in two parts, each by the warpgroup that last reads it:
//   a stages: WG0 atoms 0-3 (after its PV_a), WG1 atoms 4-8 (after its sP0 V_a);
//   b stages: WG0 atoms 0-3 and 8 (after its sP1 V_b), WG1 atoms 4-7 (after its P_b V_b).
// A part is a cp.async gather (8 threads per row: one instruction = 4 rows x 128 contiguous bytes,
// kv_indices looked up a pair ahead) whose completion the issuing threads signal on that part's
// mbarrier (cp.async.mbarrier.arrive.noinc, 128 arrivals per phase, one phase per use of the stage);
// readers wait on the phase parity, then fence.proxy.async before their wgmma. The next pair's S is
// issued behind the last PV of the pair.
// Draft tiles (k_extend rows) with a separate v_extend: the warpgroup that ran S reloads atoms 0-7
// from v_extend before it hands the tile's P on. bf16 caches only (fp8 runs the sm90wg kernel).
#pragma once
#include <type_traits>

#include "mla_verify_wgmma.cuh"

// Timing diagnostic (never in a shipped build): MLAV_DIAG_NOLOAD=1 skips every KV load past the first
// stages' tiles (seesaw: from tile 4 on, sm90wg: from tile 2 on; the stages keep their first tiles,
// the mbarriers still complete), so a timing shows the kernel's compute and synchronization without
// its memory traffic. The output is wrong in that build.
#ifndef MLAV_DIAG_NOLOAD
#define MLAV_DIAG_NOLOAD 0
#endif

namespace mlav {
namespace ss {

using wg::ATOM;
using wg::TILE;
using wg::fence_proxy_async;
using wg::fence_regs;
using wg::make_desc;
using wg::wgmma_commit;
using wg::wgmma_fence;
using wg::wgmma_m64n256k16_ss_tb;

constexpr int BM = 64, BN = 32, STAGES = 4, THREADS = 256;
constexpr int KATOM = BN * 128;    // one 64-dim column block of a 32-row KV tile (bytes)
constexpr int KTILE = 9 * KATOM;  // 36,864 B: 32 tokens x 576 dims
struct Smem {
  static constexpr int off_q = 0;
  static constexpr int off_kv = TILE;                   // stage st at off_kv + st * KTILE
  static constexpr int off_m = off_kv + STAGES * KTILE;  // fp32 [64] running row max
  static constexpr int off_sc0 = off_m + 256;           // fp32 [64] 2^(m - m0), written by WG0
  static constexpr int off_sc1 = off_sc0 + 256;         // fp32 [64] 2^(m0 - m1), written by WG1
  static constexpr int off_l = off_sc1 + 256;           // fp32 [2][64] row sums of both halves (epilogue)
  static constexpr int off_bar = off_l + 512;           // 8 x mbarrier: [stage][loading warpgroup]
  static constexpr int used = off_bar + 8 * STAGES * 2;
  static constexpr int bytes = used + 1024;  // slack to align the base to 1024 B (swizzle period)
};
// Named barrier ids (0 is __syncthreads); 1-4 span both warpgroups, 5 + g one warpgroup.
enum : int { NB_SCALE0 = 1, NB_SCALE1 = 2, NB_P0READY = 3, NB_P1READY = 4, NB_WG = 5 };

__device__ __forceinline__ void nb_sync(int id, int n) { asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(n) : "memory"); }
__device__ __forceinline__ void nb_arrive(int id, int n) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(n) : "memory");
}
__device__ __forceinline__ void mbar_init(uint32_t bar, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
// Arrives on `bar` once every cp.async this thread issued so far has landed.
__device__ __forceinline__ void mbar_arrive_cp_async(uint32_t bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(bar) : "memory");
}
// Waits until the phase of parity `parity` of `bar` has completed.
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
  asm volatile(
      "{\n.reg .pred p;\nWAIT:\nmbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n@!p bra WAIT;\n}\n" ::"r"(bar),
      "r"(parity)
      : "memory");
}
template <int N>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
template <int N>
__device__ __forceinline__ void fence_uregs(uint32_t* r) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+r"(r[i])::"memory");
}
__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&v);
}

// Generated by kernels/mla_verify/gen_wgmma.py.
// D[64 x 256] (+)= A[64 x 16] (registers: 4 bf16x2 per thread) * B[16 x 256] (smem, N-major); 128 fp32 per thread.
__device__ __forceinline__ void wgmma_m64n256k16_rs_tb(float* d, const uint32_t* a, uint64_t desc_b, int accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %133, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}, {%128, %129, %130, %131}, %132, p, 1, 1, 1;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(accumulate));
}

// S (+)= Q K^T over the 64-dim atoms [A0, A1) of a tile: k-steps 4 A0 .. 4 A1 - 1 (the first one
// overwrites the accumulator when A0 = 0).
// A value the compiler must recompute where it is used: keeps the 36 k-step descriptors of an
// unrolled S out of registers across the pair loop (hoisted, they cost 144 registers).
__device__ __forceinline__ uint64_t opaque(uint64_t x) {
  asm volatile("" : "+l"(x));
  return x;
}

// S = Q K^T over the whole tile: 36 k-steps of m64n32k16 (Q atoms of 8 KiB, K atoms of 4 KiB).
__device__ __forceinline__ void issue_s(float* sc, uint32_t sQ, uint32_t stage) {
  const uint64_t dq = opaque(make_desc(sQ, 16, 1024)), dk = opaque(make_desc(stage, 16, 1024));
#pragma unroll
  for (int kk = 0; kk < 36; ++kk) {
    const uint64_t kq = ((kk >> 2) * ATOM + (kk & 3) * 32) >> 4, kk4 = ((kk >> 2) * KATOM + (kk & 3) * 32) >> 4;
    wg::wgmma_m64n32k16_ss(sc, dq + kq, dk + kk4, kk > 0);
  }
}
// O[:, half) += P V over the tile's 32 tokens; P from registers (A-fragments of S's accumulator
// layout) and V = four atoms from v_atoms, read N-major.
__device__ __forceinline__ void issue_pv_regs(float* o, const uint32_t* pb, uint32_t v_atoms) {
  const uint64_t dv = opaque(make_desc(v_atoms, KATOM, 1024));
#pragma unroll
  for (int ks = 0; ks < BN / 16; ++ks) wgmma_m64n256k16_rs_tb(o, pb + 4 * ks, dv + ((ks * 2048) >> 4), 1);
}
// wgmma descriptor of a K-major operand in the 64-byte swizzle (8-row groups of 512 B).
__device__ __forceinline__ uint64_t make_desc_sw64(uint32_t addr) {
  return (uint64_t)((addr & 0x3FFFF) >> 4) | ((uint64_t)(16 >> 4) << 16) | ((uint64_t)(512 >> 4) << 32) | (2ull << 62);
}
// The same with P from shared memory ([64 x 32] bf16, 64B-swizzled, at p_atom).
__device__ __forceinline__ void issue_pv_smem(float* o, uint32_t p_atom, uint32_t v_atoms) {
  const uint64_t dp = opaque(make_desc_sw64(p_atom)), dv = opaque(make_desc(v_atoms, KATOM, 1024));
#pragma unroll
  for (int ks = 0; ks < BN / 16; ++ks) wgmma_m64n256k16_ss_tb(o, dp + ((ks * 32) >> 4), dv + ((ks * 2048) >> 4), 1);
}

// bf16 P (pb[k] = columns 8 (k/2) + 2 (lane % 4) + {0, 1} of row r0 + 8 (k % 2)) to a K-major
// [64 x 32] tile in the 64-byte swizzle: 16-byte chunk c of row r at r * 64 + ((c ^ (r / 2 % 4)) << 4).
__device__ __forceinline__ void store_p(uint32_t p_atom, const uint32_t* pb, int r0, int lane) {
#pragma unroll
  for (int k = 0; k < 8; ++k) {
    const int r = r0 + 8 * (k & 1), c = k >> 1;
    const uint32_t addr = p_atom + r * 64 + ((c ^ ((r >> 1) & 3)) << 4) + (lane & 3) * 4;
    asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(addr), "r"(pb[k]) : "memory");
  }
}

__global__ void __launch_bounds__(THREADS, 1) mla_verify_split_seesaw_kernel(const Params p) {
  extern __shared__ __align__(1024) uint8_t smem_raw[];
  const uint32_t raw = smem_u32(smem_raw);
  const uint32_t base = (raw + 1023u) & ~1023u;
  uint8_t* smem = smem_raw + (base - raw);
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  // warpgroup (broadcast from lane 0: ptxas then knows it is warp-uniform), warp in it, thread in it
  const int grp = __shfl_sync(0xffffffffu, tid >> 7, 0), wq = warp & 3, wt = tid & 127;
  const int s = blockIdx.y;
  pdl_signal(p);
  const Work w = work_of(p, blockIdx.x, s, blockIdx.z, BM, BN);
  if (w.row0 >= w.R) return;
  if (w.ntiles == 0) {  // empty split: sentinel only
    for (int r = tid; r < BM; r += THREADS)
      if (w.row0 + r < w.R) p.ws_lse[(int64_t)s * p.T * p.H + w.grow0 + r] = -INFINITY;
    return;
  }
  float* sM = reinterpret_cast<float*>(smem + Smem::off_m);
  float* sSc0 = reinterpret_cast<float*>(smem + Smem::off_sc0);
  float* sSc1 = reinterpret_cast<float*>(smem + Smem::off_sc1);
  float* sL = reinterpret_cast<float*>(smem + Smem::off_l);
  const uint32_t sQ = base + Smem::off_q, sKV = base + Smem::off_kv, sBar = base + Smem::off_bar;
  // Tile j lives in stage j % 4; its parts' mbarriers complete once per use of the stage (parity).
  auto stage = [&](int j) { return sKV + (uint32_t)(j & 3) * KTILE; };
  auto bar = [&](int j, int part) { return sBar + 8u * (2 * (j & 3) + part); };
  auto parity = [](int j) { return (uint32_t)(j >> 2) & 1u; };

  // Loader lanes: 8 per row (sub = 16-byte chunk within an atom), rows rr and rr + 16 of the tile.
  const int sub = wt & 7, rr = wt >> 3;
  // Slot id of token r of tile j as loaded (-1: draft tile or past the split), validated where it is
  // used: a check here would stall the thread on the index load a pair before the copy needs it.
  auto fetch_slot = [&](int j, int r) -> int64_t {
    if (MLAV_DIAG_NOLOAD && j >= 4) return -1;
    return tile_slot(p, w, j, BN, r);
  };
  // Copies atoms [a_lo, a_hi) (and the rope atom if `rope`) of tile j's rows into its stage, then
  // arrives on the part's mbarrier.
  auto load_part = [&](int j, int a_lo, int a_hi, bool rope, int part, const int64_t* sl) {
    const uint32_t st = stage(j);
#pragma unroll
    for (int k = 0; k < (MLAV_DIAG_NOLOAD && j >= 4 ? 0 : 2); ++k) {
      const int r = rr + 16 * k;
      const __nv_bfloat16* src;
      bool ok;
      if (j < w.n_pre) {
        ok = sl[k] >= 0 && sl[k] < p.num_slots;
        src = p.kbuf + (ok ? sl[k] * p.kb_st : 0);
      } else {
        const int d = (j - w.n_pre) * BN + r;
        ok = d < w.n_b;
        src = p.kext + (ok ? (w.qo0 + d) * p.ke_st : 0);
      }
      src += sub * 8;
      const uint32_t dst = st + r * 128 + ((sub ^ (r & 7)) << 4);
      const int nb = ok ? 16 : 0;
#pragma unroll
      for (int a = 0; a < 8; ++a)
        if (a >= a_lo && a < a_hi) cp_async16(dst + a * KATOM, src + a * 64, nb);
      if (rope) cp_async16(dst + 8 * KATOM, src + 8 * 64, nb);
    }
    cp_async_commit();
    mbar_arrive_cp_async(bar(j, part));
  };
  // Draft tile j with a separate v_extend: dims 0..511 of its rows reloaded into its stage by this
  // warpgroup, landed and fenced before the warpgroup hands the tile on (S has read K by then).
  auto reload_v = [&](int j) {
    const uint32_t st = stage(j);
#pragma unroll
    for (int k = 0; k < 2; ++k) {
      const int r = rr + 16 * k;
      bool ok;
      const __nv_bfloat16* src = v_src(p, w, j, BN, r, ok) + sub * 8;
      const uint32_t dst = st + r * 128 + ((sub ^ (r & 7)) << 4);
#pragma unroll
      for (int a = 0; a < 8; ++a) cp_async16(dst + a * KATOM, ok ? src + a * 64 : src, ok ? 16 : 0);
    }
    cp_async_commit();
    cp_async_wait<0>();
    fence_proxy_async();
    nb_sync(NB_WG + grp, 128);
  };
  // This warpgroup's part of tile j: a tiles (even j) WG0 atoms 0-3, WG1 4-8; b tiles WG0 0-3 + 8, WG1 4-7.
  auto load_mine = [&](int j, const int64_t* sl) {
    if (grp == 0) load_part(j, 0, 4, (j & 1) != 0, 0, sl);
    else load_part(j, 4, 8, (j & 1) == 0, 1, sl);
  };

  int64_t sa[2], sb[2];  // slot ids of the next a / b tile's rows rr and rr + 16
  int64_t s2[2], s3[2];
#pragma unroll
  for (int k = 0; k < 2; ++k) {
    sa[k] = fetch_slot(0, rr + 16 * k);
    sb[k] = fetch_slot(1, rr + 16 * k);
    s2[k] = fetch_slot(2, rr + 16 * k);
    s3[k] = fetch_slot(3, rr + 16 * k);
  }
  if (tid == 0) {
#pragma unroll
    for (int i = 0; i < 2 * STAGES; ++i) mbar_init(sBar + 8u * i, 128);
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  if (tid < BM) sM[tid] = -INFINITY;
  {  // Q: all 256 threads, rows tid/8 and tid/8 + 32, every atom
    const int qs = tid & 7;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = (tid >> 3) + 32 * h;
      bool ok;
      const __nv_bfloat16* src = q_src(p, w, r, ok) + qs * 8;
      const uint32_t dst = sQ + r * 128 + ((qs ^ (r & 7)) << 4);
#pragma unroll
      for (int a = 0; a < 9; ++a) cp_async16(dst + a * ATOM, src + a * 64, ok ? 16 : 0);
    }
    cp_async_commit();
  }
  __syncthreads();  // mbarriers initialized before any arrival
  load_mine(0, sa);
  if (w.ntiles > 1) load_mine(1, sb); else cp_async_commit();  // empty groups keep Q the fifth most recent
  if (w.ntiles > 2) load_mine(2, s2); else cp_async_commit();
  if (w.ntiles > 3) load_mine(3, s3); else cp_async_commit();
#pragma unroll
  for (int k = 0; k < 2; ++k) {
    sa[k] = fetch_slot(4, rr + 16 * k);
    sb[k] = fetch_slot(5, rr + 16 * k);
  }
  cp_async_wait<4>();  // Q landed (this thread's copies)
  fence_proxy_async();
  __syncthreads();  // Q and sM visible to every warpgroup

  const float sl2 = p.scale_log2;
  const int r0 = wq * 16 + (lane >> 2);  // tile rows of this thread: r0 and r0 + 8
  int tok_row[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int gr = w.row0 + r0 + 8 * h;
    tok_row[h] = gr < w.R ? gr / p.H : -1;
  }
  const int64_t mask_base = p.mask_mode == 0 ? ld_idx(p.mask_indptr, p.mi_is64, blockIdx.z) : 0;
  // Scale (log2 domain) and mask S of tile j in place; row maxima over this thread's quad.
  auto scale_mask = [&](float* sc, int j, float* rmax) {
    const bool draft = j >= w.n_pre;
    const int t_start = draft ? (j - w.n_pre) * BN : w.pb + j * BN;
    const int t_end = draft ? w.n_b : w.pe;
    rmax[0] = rmax[1] = -INFINITY;
    if (!draft && t_start + BN <= t_end) {  // full prefix tile (the common case): scale only
#pragma unroll
      for (int e = 0; e < 16; ++e) {
        sc[e] *= sl2;
        rmax[(e >> 1) & 1] = fmaxf(rmax[(e >> 1) & 1], sc[e]);
      }
    } else {
#pragma unroll
      for (int e = 0; e < 16; ++e) {
        const int h = (e >> 1) & 1;
        const int t = t_start + (e >> 2) * 8 + 2 * (lane & 3) + (e & 1);
        bool vis = t < t_end;
        if (draft && vis && tok_row[h] >= 0) vis = draft_visible(p, mask_base, w, tok_row[h], t);
        sc[e] = vis ? sc[e] * sl2 : -INFINITY;
        rmax[h] = fmaxf(rmax[h], sc[e]);
      }
    }
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      rmax[h] = fmaxf(rmax[h], __shfl_xor_sync(0xffffffffu, rmax[h], 1));
      rmax[h] = fmaxf(rmax[h], __shfl_xor_sync(0xffffffffu, rmax[h], 2));
    }
  };

  float o[128];
#pragma unroll
  for (int i = 0; i < 128; ++i) o[i] = 0.f;
  float l_run[2] = {0.f, 0.f};
  float sc[16];    // S of this warpgroup's tile (fp32 accumulator), then its P
  uint32_t pb[8];  // P as bf16 A-fragments (4 per 16-token k-step)
  using T_ = std::true_type;
  using F_ = std::false_type;
  if (grp == 0) {
    // ======================= warpgroup 0: tiles a = 0, 2, 4, ... and O[:, 0:256) =======================
    // One pair; HAS_B: tile b exists, NXT: tile a' = a + 2 exists (compile-time, so that no wgmma
    // sits in a data-dependent branch: ptxas would serialize every wgmma of the kernel).
    auto pair = [&](int i, auto HAS_B, auto NXT) {
      const int ja = 2 * i, jb = ja + 1;
      // ---- softmax of tile a against the running max ----
      float rmax[2], sc1[2];
      scale_mask(sc, ja, rmax);
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int r = r0 + 8 * h;
        const float m_old = sM[r];
        const float m0 = fmaxf(m_old, rmax[h]);
        const float m_use = m0 == -INFINITY ? 0.f : m0;
        const float a_old = exp2f(m_old - m_use);  // m_old = -inf -> 0
        float psum = 0.f;
#pragma unroll
        for (int e = 2 * h; e < 16; e += 4) {
          sc[e] = exp2f(sc[e] - m_use);
          sc[e + 1] = exp2f(sc[e + 1] - m_use);
          psum += sc[e] + sc[e + 1];
        }
        l_run[h] = l_run[h] * a_old + psum;
#pragma unroll
        for (int c = 0; c < 32; ++c) {
          o[4 * c + 2 * h] *= a_old;
          o[4 * c + 2 * h + 1] *= a_old;
        }
        __syncwarp();  // every lane of the quad has read sM[r]
        if ((lane & 3) == 0) {
          sM[r] = m0;
          sSc0[r] = a_old;
        }
      }
#pragma unroll
      for (int k = 0; k < 8; ++k) pb[k] = pack_bf16(sc[2 * k], sc[2 * k + 1]);
      if (ja >= w.n_pre && !p.v_alias) reload_v(ja);
      nb_arrive(NB_SCALE0, THREADS);
      // ---- O_L += P_a V_a[:, 0:256) ----
      fence_regs<128>(o);
      fence_uregs<8>(pb);
      wgmma_fence();
      issue_pv_regs(o, pb, stage(ja));
      wgmma_commit();
      wgmma_wait<0>();
      fence_regs<128>(o);
      fence_uregs<8>(pb);
      if (ja + 4 < w.ntiles) {  // a's atoms 0-3 are free (WG1 reads only 4-8 of an a stage): tile a + 4
        load_part(ja + 4, 0, 4, false, 0, sa);
#pragma unroll
        for (int k = 0; k < 2; ++k) sa[k] = fetch_slot(ja + 6, rr + 16 * k);
      }
      // ---- sP0 = P_a at WG1's max m1 ----
      nb_sync(NB_SCALE1, THREADS);
#pragma unroll
      for (int h = 0; h < 2; ++h) sc1[h] = sSc1[r0 + 8 * h];
#pragma unroll
      for (int k = 0; k < 8; ++k) pb[k] = pack_bf16(sc[2 * k] * sc1[k & 1], sc[2 * k + 1] * sc1[k & 1]);
      store_p(stage(ja) + 8 * KATOM, pb, r0, lane);
      fence_proxy_async();
      nb_arrive(NB_P0READY, THREADS);
      // ---- O_L = O_L * 2^(m0 - m1) + sP1 V_b[:, 0:256) ----
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        l_run[h] *= sc1[h];
#pragma unroll
        for (int c = 0; c < 32; ++c) {
          o[4 * c + 2 * h] *= sc1[h];
          o[4 * c + 2 * h + 1] *= sc1[h];
        }
      }
      nb_sync(NB_P1READY, THREADS);
      if constexpr (HAS_B.value) {
        mbar_wait(bar(jb, 0), parity(jb));
        fence_proxy_async();
        fence_regs<128>(o);
        wgmma_fence();
        issue_pv_smem(o, stage(jb) + 8 * KATOM, stage(jb));
        wgmma_commit();
      }
      // ---- next pair's S_a' behind the PV (its stage was loaded a pair ago). One accumulator
      // chain: a barrier wait between two of its wgmmas makes ptxas serialize them (C7520). ----
      if constexpr (NXT.value) {
        mbar_wait(bar(ja + 2, 0), parity(ja + 2));
        mbar_wait(bar(ja + 2, 1), parity(ja + 2));
        fence_proxy_async();
        wgmma_fence();
        issue_s(sc, sQ, stage(ja + 2));
        wgmma_commit();
        if constexpr (HAS_B.value) wgmma_wait<1>();  // PV_b done: b's atoms 0-3 and 8 are free
        fence_regs<128>(o);
        if (jb + 4 < w.ntiles) {
          load_part(jb + 4, 0, 4, true, 0, sb);
#pragma unroll
          for (int k = 0; k < 2; ++k) sb[k] = fetch_slot(jb + 6, rr + 16 * k);
        }
      }
      wgmma_wait<0>();
      fence_regs<128>(o);
      fence_regs<16>(sc);
    };
    mbar_wait(bar(0, 0), 0);
    mbar_wait(bar(0, 1), 0);
    fence_proxy_async();
    wgmma_fence();
    issue_s(sc, sQ, stage(0));
    wgmma_commit();
    wgmma_wait<0>();
    fence_regs<16>(sc);
    int i = 0;
    for (; 2 * i + 2 < w.ntiles; ++i) pair(i, T_{}, T_{});
    if (2 * i + 1 < w.ntiles) pair(i, T_{}, F_{});
    else pair(i, F_{}, F_{});
  } else {
    // ======================= warpgroup 1: tiles b = 1, 3, 5, ... and O[:, 256:512) =======================
    // HAS_B: tile b exists, NXT: tile b' = b + 2 exists.
    auto pair = [&](int i, auto HAS_B, auto NXT) {
      const int ja = 2 * i, jb = ja + 1;
      float rmax[2] = {-INFINITY, -INFINITY};
      if constexpr (HAS_B.value) scale_mask(sc, jb, rmax);
      // ---- softmax of tile b against WG0's max m0 of this pair ----
      nb_sync(NB_SCALE0, THREADS);
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int r = r0 + 8 * h;
        const float m0 = sM[r], a0 = sSc0[r];
        const float m1 = fmaxf(m0, rmax[h]);
        const float m_use = m1 == -INFINITY ? 0.f : m1;
        const float a1 = exp2f(m0 - m_use);  // m0 = -inf -> 0
        float psum = 0.f;
        if constexpr (HAS_B.value) {
#pragma unroll
          for (int e = 2 * h; e < 16; e += 4) {
            sc[e] = exp2f(sc[e] - m_use);
            sc[e + 1] = exp2f(sc[e + 1] - m_use);
            psum += sc[e] + sc[e + 1];
          }
        }
        const float a = a0 * a1;  // O_R and l were at the max before this pair
        l_run[h] = l_run[h] * a + psum;
#pragma unroll
        for (int c = 0; c < 32; ++c) {
          o[4 * c + 2 * h] *= a;
          o[4 * c + 2 * h + 1] *= a;
        }
        __syncwarp();  // every lane of the quad has read sM[r]
        if ((lane & 3) == 0) {
          sM[r] = m1;
          sSc1[r] = a1;
        }
      }
      if constexpr (HAS_B.value) {
        if (jb >= w.n_pre && !p.v_alias) reload_v(jb);
      }
      nb_arrive(NB_SCALE1, THREADS);
      // ---- sP1 and O_R += P_b V_b[:, 256:512) ----
      fence_regs<128>(o);
      if constexpr (HAS_B.value) {
#pragma unroll
        for (int k = 0; k < 8; ++k) pb[k] = pack_bf16(sc[2 * k], sc[2 * k + 1]);
        store_p(stage(jb) + 8 * KATOM, pb, r0, lane);
        fence_proxy_async();
        fence_uregs<8>(pb);
        wgmma_fence();
        issue_pv_regs(o, pb, stage(jb) + 4 * KATOM);
        wgmma_commit();
      }
      // ---- O_R += sP0 V_a[:, 256:512) ----
      nb_sync(NB_P0READY, THREADS);
      mbar_wait(bar(ja, 1), parity(ja));  // this warpgroup's own part of tile a (landed: WG0 waited for it)
      fence_proxy_async();
      wgmma_fence();
      issue_pv_smem(o, stage(ja) + 8 * KATOM, stage(ja) + 4 * KATOM);
      wgmma_commit();
      nb_arrive(NB_P1READY, THREADS);
      if constexpr (HAS_B.value) {
        wgmma_wait<1>();  // P_b V_b done: b's atoms 4-7 are free
        fence_uregs<8>(pb);
        if (jb + 4 < w.ntiles) {
          load_part(jb + 4, 4, 8, false, 1, sb);
#pragma unroll
          for (int k = 0; k < 2; ++k) sb[k] = fetch_slot(jb + 6, rr + 16 * k);
        }
      }
      wgmma_wait<0>();  // sP0 V_a done: a's atoms 4-8 are free
      fence_regs<128>(o);
      if (ja + 4 < w.ntiles) {
        load_part(ja + 4, 4, 8, true, 1, sa);
#pragma unroll
        for (int k = 0; k < 2; ++k) sa[k] = fetch_slot(ja + 6, rr + 16 * k);
      }
      // ---- next pair's S_b' (its stage was loaded a pair ago) ----
      if constexpr (NXT.value) {
        mbar_wait(bar(jb + 2, 0), parity(jb + 2));
        mbar_wait(bar(jb + 2, 1), parity(jb + 2));
        fence_proxy_async();
        wgmma_fence();
        issue_s(sc, sQ, stage(jb + 2));
        wgmma_commit();
        wgmma_wait<0>();
        fence_regs<16>(sc);
      }
    };
    if (w.ntiles > 1) {
      mbar_wait(bar(1, 0), 0);
      mbar_wait(bar(1, 1), 0);
      fence_proxy_async();
      wgmma_fence();
      issue_s(sc, sQ, stage(1));
      wgmma_commit();
      wgmma_wait<0>();
      fence_regs<16>(sc);
    }
    int i = 0;
    for (; 2 * i + 3 < w.ntiles; ++i) pair(i, T_{}, T_{});
    if (2 * i + 2 < w.ntiles) pair(i++, T_{}, F_{});
    if (2 * i + 1 < w.ntiles) pair(i, T_{}, F_{});
    else pair(i, F_{}, F_{});
  }
  cp_async_wait<0>();

  // ---- finalize: row sums of both halves, normalized output or split partial ----
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    l_run[h] += __shfl_xor_sync(0xffffffffu, l_run[h], 1);
    l_run[h] += __shfl_xor_sync(0xffffffffu, l_run[h], 2);
    if ((lane & 3) == 0) sL[grp * BM + r0 + 8 * h] = l_run[h];
  }
  __syncthreads();  // sL complete; sM holds the final max (WG1 wrote it last)
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int r = r0 + 8 * h;
    if (w.row0 + r >= w.R) continue;  // padded row: write nothing
    const float l = sL[r] + sL[BM + r];
    const float inv = l > 0.f ? 1.f / l : 0.f;
    const RowOut ro = row_out(p, w, s, r);
#pragma unroll
    for (int i = 0; i < 32; ++i) ro.put(grp * 256 + i * 8 + 2 * (lane & 3), o[4 * i + 2 * h] * inv, o[4 * i + 2 * h + 1] * inv);
    if (w.S > 1 && grp == 0 && (lane & 3) == 0)
      p.ws_lse[(int64_t)s * p.T * p.H + w.grow0 + r] = l > 0.f ? sM[r] + log2f(l) : -INFINITY;
  }
}

}  // namespace ss
}  // namespace mlav
