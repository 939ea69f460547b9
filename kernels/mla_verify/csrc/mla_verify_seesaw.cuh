// sm_90a "seesaw" split kernel of the MLA verify attention (tile config sm90ss, cfg 3): the two
// warpgroups take alternate KV tiles for S = Q K^T and hand their P to each other, so one
// warpgroup's softmax runs while the other's wgmma keeps the tensor cores busy (the schedule
// FlashMLA's dense decode uses on Hopper; this is our own implementation for SGLang's page_size 1
// gather, drafts and split-K partials).
//
// CTA = 2 warpgroups (256 threads), BM = 64 packed rows, BN = 64 KV tokens, tiles processed in pairs
// (a = 2i in KV stage 0, b = 2i + 1 in stage 1). Shared memory (from a 1024-byte aligned base): Q
// [64 x 576] and two KV stages [64 x 576] bf16 in wg::'s 128B-swizzled atom layout (9 atoms of
// 64 dims; atom 8 = rope), fp32 row state sM / sScale0 / sScale1 [64] and sL [2][64], four
// mbarriers. Output columns are split: warpgroup 0 owns O[:, 0:256) (O_L), warpgroup 1 O[:, 256:512)
// (O_R), 128 fp32 registers per thread each. Per pair (m = running row max, log2 domain):
//   WG0: S_a = Q K_a^T (m64n64k576); m0 = max(m, rowmax S_a); O_L *= 2^(m - m0); P_a = 2^(S_a - m0);
//        O_L += P_a V_a[:, 0:256) (P_a from registers) | WG1 meanwhile: S_b, then
//   WG1: m1 = max(m0, rowmax S_b); O_R *= 2^(m - m1); P_b = 2^(S_b - m1); P_b -> sP1 (stage 1, atom 8);
//        O_R += P_b V_b[:, 256:512) (registers), O_R += sP0 V_a[:, 256:512)
//   WG0: sP0 = P_a * 2^(m0 - m1) (stage 0, atom 8: K_a's rope, dead after S_a); O_L *= 2^(m0 - m1);
//        O_L += sP1 V_b[:, 0:256)
// so both halves end the pair at m1. Four named barriers order the exchanges (SCALE0, SCALE1,
// P0READY, P1READY: 128 threads arrive, 128 sync). Every row is read by one warpgroup in S and by
// both in PV, so a KV stage is reloaded in two parts, each by the warpgroup that last reads it:
//   stage 0: WG0 atoms 0-3 (after its PV_a), WG1 atoms 4-8 (after its sP0 V_a);
//   stage 1: WG0 atoms 0-3 and 8 (after its sP1 V_b), WG1 atoms 4-7 (after its P_b V_b).
// A part is a cp.async gather (8 threads per row: one instruction = 4 rows x 128 contiguous bytes,
// kv_indices looked up a pair ahead) whose completion the issuing threads signal on that part's
// mbarrier (cp.async.mbarrier.arrive.noinc, 128 arrivals per phase, one phase per pair); readers
// wait on the parity of the pair, then fence.proxy.async before their wgmma. The next pair's S is
// issued behind the last PV of the pair.
// Draft tiles (k_extend rows) with a separate v_extend: the warpgroup that ran S reloads atoms 0-7
// from v_extend before it hands the tile's P on. bf16 caches only (fp8 runs the sm90wg kernel).
// Slot ids are kept as int: the launcher runs this config only when the cache has < 2^31 slots.
#pragma once
#include <type_traits>

#include "mla_verify_wgmma.cuh"

// Timing diagnostic (never in a shipped build): MLAV_DIAG_NOLOAD=1 skips every KV load from tile 2 on
// (the stages keep tiles 0 and 1, the mbarriers still complete), so a timing shows the kernel's
// compute and synchronization without its memory traffic. The output is wrong in that build.
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

constexpr int BM = 64, BN = 64, THREADS = 256;
struct Smem {
  static constexpr int off_q = 0;
  static constexpr int off_kv = TILE;              // stage st at off_kv + st * TILE
  static constexpr int off_m = off_kv + 2 * TILE;  // fp32 [64] running row max
  static constexpr int off_sc0 = off_m + 256;      // fp32 [64] 2^(m - m0), written by WG0
  static constexpr int off_sc1 = off_sc0 + 256;    // fp32 [64] 2^(m0 - m1), written by WG1
  static constexpr int off_l = off_sc1 + 256;      // fp32 [2][64] row sums of both halves (epilogue)
  static constexpr int off_bar = off_l + 512;      // 4 x mbarrier: [stage][loading warpgroup]
  static constexpr int used = off_bar + 32;
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
// D[64 x 64] (+)= A[64 x 16] (smem, K-major) * B[16 x 64] (smem, K-major); 32 fp32 per thread.
__device__ __forceinline__ void wgmma_m64n64k16_ss(float* d, uint64_t desc_a, uint64_t desc_b, int accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, p, 1, 1, 0, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
      : "l"(desc_a), "l"(desc_b), "r"(accumulate));
}

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

template <int A0, int A1>
__device__ __forceinline__ void issue_s(float* sc, uint32_t sQ, uint32_t stage) {
  const uint64_t dq = opaque(make_desc(sQ, 16, 1024)), dk = opaque(make_desc(stage, 16, 1024));
#pragma unroll
  for (int kk = 4 * A0; kk < 4 * A1; ++kk) {
    const uint64_t koff = ((kk >> 2) * ATOM + (kk & 3) * 32) >> 4;  // start address field, 16 B units
    wgmma_m64n64k16_ss(sc, dq + koff, dk + koff, kk > 0);
  }
}
// O[:, half) += P V over the tile's 64 tokens; P from registers (A-fragments of S's accumulator
// layout) and V = atoms 4 h .. 4 h + 3 of `stage` read N-major.
__device__ __forceinline__ void issue_pv_regs(float* o, const uint32_t* pb, uint32_t v_atoms) {
  const uint64_t dv = opaque(make_desc(v_atoms, ATOM, 1024));
#pragma unroll
  for (int ks = 0; ks < BN / 16; ++ks) wgmma_m64n256k16_rs_tb(o, pb + 4 * ks, dv + ((ks * 2048) >> 4), 1);
}
// The same with P from shared memory (one K-major swizzled atom at p_atom).
__device__ __forceinline__ void issue_pv_smem(float* o, uint32_t p_atom, uint32_t v_atoms) {
  const uint64_t dp = opaque(make_desc(p_atom, 16, 1024)), dv = opaque(make_desc(v_atoms, ATOM, 1024));
#pragma unroll
  for (int ks = 0; ks < BN / 16; ++ks) wgmma_m64n256k16_ss_tb(o, dp + ((ks * 32) >> 4), dv + ((ks * 2048) >> 4), 1);
}

// bf16 P (pb[k] = columns 8 (k/2) + 2 (lane % 4) + {0, 1} of row r0 + 8 (k % 2)) to a K-major
// swizzled [64 x 64] atom.
__device__ __forceinline__ void store_p(uint32_t p_atom, const uint32_t* pb, int r0, int lane) {
#pragma unroll
  for (int k = 0; k < 16; ++k) {
    const int r = r0 + 8 * (k & 1), i = k >> 1;
    const uint32_t addr = p_atom + r * 128 + ((i ^ (r & 7)) << 4) + (lane & 3) * 4;
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
  const uint32_t st0 = sKV, st1 = sKV + TILE;
  auto bar = [&](int stage, int part) { return sBar + 8u * (2 * stage + part); };

  // Loader lanes: 8 per row (sub = 16-byte chunk within an atom), rows rr + 16 k of the tile.
  const int sub = wt & 7, rr = wt >> 3;
  // Validated prefix slot of token r of tile j (-1: draft tile, past the split, or a bad slot id).
  auto fetch_slot = [&](int j, int r) -> int {
    if (MLAV_DIAG_NOLOAD && j >= 2) return -1;
    const int64_t v = tile_slot(p, w, j, BN, r);
    return (v >= 0 && v < p.num_slots) ? (int)v : -1;
  };
  // Copies this warpgroup's atoms of tile j into `stage`, then arrives on the part's mbarrier.
  auto load_part = [&](int j, uint32_t stage, int a_lo, int a_hi, bool rope, uint32_t mbar, const int* sl) {
#pragma unroll
    for (int k = 0; k < (MLAV_DIAG_NOLOAD && j >= 2 ? 0 : 4); ++k) {
      const int r = rr + 16 * k;
      const __nv_bfloat16* src;
      bool ok;
      if (j < w.n_pre) {
        ok = sl[k] >= 0;
        src = p.kbuf + (ok ? (int64_t)sl[k] * p.kb_st : 0);
      } else {
        const int d = (j - w.n_pre) * BN + r;
        ok = d < w.n_b;
        src = p.kext + (ok ? (w.qo0 + d) * p.ke_st : 0);
      }
      src += sub * 8;
      const uint32_t dst = stage + r * 128 + ((sub ^ (r & 7)) << 4);
      const int nb = ok ? 16 : 0;
#pragma unroll
      for (int a = 0; a < 8; ++a)
        if (a >= a_lo && a < a_hi) cp_async16(dst + a * ATOM, src + a * 64, nb);
      if (rope) cp_async16(dst + 8 * ATOM, src + 8 * 64, nb);
    }
    cp_async_commit();
    mbar_arrive_cp_async(mbar);
  };
  // Draft tile j with a separate v_extend: dims 0..511 of its rows reloaded into `stage` by this
  // warpgroup, landed and fenced before the warpgroup hands the tile on (S has read K by then).
  auto reload_v = [&](int j, uint32_t stage) {
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const int r = rr + 16 * k;
      bool ok;
      const __nv_bfloat16* src = v_src(p, w, j, BN, r, ok) + sub * 8;
      const uint32_t dst = stage + r * 128 + ((sub ^ (r & 7)) << 4);
#pragma unroll
      for (int a = 0; a < 8; ++a) cp_async16(dst + a * ATOM, ok ? src + a * 64 : src, ok ? 16 : 0);
    }
    cp_async_commit();
    cp_async_wait<0>();
    fence_proxy_async();
    nb_sync(NB_WG + grp, 128);
  };

  int sa[4], sb[4];  // slot ids of the next stage-0 / stage-1 tile's rows rr + 16 k
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    sa[k] = fetch_slot(0, rr + 16 * k);
    sb[k] = fetch_slot(1, rr + 16 * k);
  }
  if (tid == 0) {
#pragma unroll
    for (int i = 0; i < 4; ++i) mbar_init(sBar + 8u * i, 128);
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
  if (grp == 0) load_part(0, st0, 0, 4, false, bar(0, 0), sa);
  else load_part(0, st0, 4, 8, true, bar(0, 1), sa);
  if (w.ntiles > 1) {
    if (grp == 0) load_part(1, st1, 0, 4, true, bar(1, 0), sb);
    else load_part(1, st1, 4, 8, false, bar(1, 1), sb);
  } else {
    cp_async_commit();  // empty group: the Q group stays the third most recent
  }
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    sa[k] = fetch_slot(2, rr + 16 * k);
    sb[k] = fetch_slot(3, rr + 16 * k);
  }
  cp_async_wait<2>();  // Q landed (this thread's copies)
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
      for (int e = 0; e < 32; ++e) {
        sc[e] *= sl2;
        rmax[(e >> 1) & 1] = fmaxf(rmax[(e >> 1) & 1], sc[e]);
      }
    } else {
#pragma unroll
      for (int e = 0; e < 32; ++e) {
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
  float sc[32];     // S of this warpgroup's tile (fp32 accumulator), then its P
  uint32_t pb[16];  // P as bf16 A-fragments (4 per 16-token k-step)

  using T_ = std::true_type;
  using F_ = std::false_type;
  if (grp == 0) {
    // ======================= warpgroup 0: tiles a = 0, 2, 4, ... (stage 0), O[:, 0:256) =======================
    // One pair; HAS_B: tile b exists, NXT: tile a' = a + 2 exists (compile-time, so that no wgmma
    // sits in a data-dependent branch: ptxas would serialize every wgmma of the kernel).
    auto pair = [&](int i, auto HAS_B, auto NXT) {
      const int ja = 2 * i, jb = ja + 1;
      const uint32_t par = i & 1;
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
        for (int e = 2 * h; e < 32; e += 4) {
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
      for (int k = 0; k < 16; ++k) pb[k] = pack_bf16(sc[2 * k], sc[2 * k + 1]);
      if (ja >= w.n_pre && !p.v_alias) reload_v(ja, st0);
      nb_arrive(NB_SCALE0, THREADS);
      // ---- O_L += P_a V_a[:, 0:256) ----
      fence_regs<128>(o);
      fence_uregs<16>(pb);
      wgmma_fence();
      issue_pv_regs(o, pb, st0);
      wgmma_commit();
      wgmma_wait<0>();
      fence_regs<128>(o);
      fence_uregs<16>(pb);
      if constexpr (NXT.value) {  // stage 0 atoms 0-3 are free (WG1 reads only 4-8 of stage 0): tile a'
        load_part(ja + 2, st0, 0, 4, false, bar(0, 0), sa);
#pragma unroll
        for (int k = 0; k < 4; ++k) sa[k] = fetch_slot(ja + 4, rr + 16 * k);
      }
      // ---- sP0 = P_a at WG1's max m1 ----
      nb_sync(NB_SCALE1, THREADS);
#pragma unroll
      for (int h = 0; h < 2; ++h) sc1[h] = sSc1[r0 + 8 * h];
#pragma unroll
      for (int k = 0; k < 16; ++k) pb[k] = pack_bf16(sc[2 * k] * sc1[k & 1], sc[2 * k + 1] * sc1[k & 1]);
      store_p(st0 + 8 * ATOM, pb, r0, lane);
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
        mbar_wait(bar(1, 0), par);
        fence_proxy_async();
        fence_regs<128>(o);
        wgmma_fence();
        issue_pv_smem(o, st1 + 8 * ATOM, st1);
        wgmma_commit();
      }
      // ---- next pair's S_a', behind the PV (atoms 0-3 landed long ago, 4-8 are WG1's part). One
      // accumulator chain: a barrier wait between two of its wgmmas makes ptxas serialize them (C7520).
      if constexpr (NXT.value) {
        mbar_wait(bar(0, 0), par ^ 1);
        mbar_wait(bar(0, 1), par ^ 1);
        fence_proxy_async();
        wgmma_fence();
        issue_s<0, 9>(sc, sQ, st0);
        wgmma_commit();
        if constexpr (HAS_B.value) wgmma_wait<1>();  // PV_b done: stage 1 atoms 0-3 and 8 are free
        fence_regs<128>(o);
        if (jb + 2 < w.ntiles) {
          load_part(jb + 2, st1, 0, 4, true, bar(1, 0), sb);
#pragma unroll
          for (int k = 0; k < 4; ++k) sb[k] = fetch_slot(jb + 4, rr + 16 * k);
        }
      }
      wgmma_wait<0>();
      fence_regs<128>(o);
      fence_regs<32>(sc);
    };
    mbar_wait(bar(0, 0), 0);
    mbar_wait(bar(0, 1), 0);
    fence_proxy_async();
    wgmma_fence();
    issue_s<0, 9>(sc, sQ, st0);
    wgmma_commit();
    wgmma_wait<0>();
    fence_regs<32>(sc);
    int i = 0;
    for (; 2 * i + 2 < w.ntiles; ++i) pair(i, T_{}, T_{});
    if (2 * i + 1 < w.ntiles) pair(i, T_{}, F_{});
    else pair(i, F_{}, F_{});
  } else {
    // ======================= warpgroup 1: tiles b = 1, 3, 5, ... (stage 1), O[:, 256:512) =======================
    // HAS_B: tile b exists, NXT: tile b' = b + 2 exists.
    auto pair = [&](int i, auto HAS_B, auto NXT) {
      const int ja = 2 * i, jb = ja + 1;
      const uint32_t par = i & 1;
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
          for (int e = 2 * h; e < 32; e += 4) {
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
        if (jb >= w.n_pre && !p.v_alias) reload_v(jb, st1);
      }
      nb_arrive(NB_SCALE1, THREADS);
      // ---- sP1 and O_R += P_b V_b[:, 256:512) ----
      fence_regs<128>(o);
      if constexpr (HAS_B.value) {
#pragma unroll
        for (int k = 0; k < 16; ++k) pb[k] = pack_bf16(sc[2 * k], sc[2 * k + 1]);
        store_p(st1 + 8 * ATOM, pb, r0, lane);
        fence_proxy_async();
        fence_uregs<16>(pb);
        wgmma_fence();
        issue_pv_regs(o, pb, st1 + 4 * ATOM);
        wgmma_commit();
      }
      // ---- O_R += sP0 V_a[:, 256:512) ----
      nb_sync(NB_P0READY, THREADS);
      mbar_wait(bar(0, 1), par);  // this warpgroup's own part of tile a (landed: WG0 waited for it)
      fence_proxy_async();
      wgmma_fence();
      issue_pv_smem(o, st0 + 8 * ATOM, st0 + 4 * ATOM);
      wgmma_commit();
      nb_arrive(NB_P1READY, THREADS);
      if constexpr (HAS_B.value) {
        wgmma_wait<1>();  // P_b V_b done: stage 1 atoms 4-7 are free
        fence_uregs<16>(pb);
        if constexpr (NXT.value) {
          load_part(jb + 2, st1, 4, 8, false, bar(1, 1), sb);
#pragma unroll
          for (int k = 0; k < 4; ++k) sb[k] = fetch_slot(jb + 4, rr + 16 * k);
        }
      }
      wgmma_wait<0>();  // sP0 V_a done: stage 0 atoms 4-8 are free
      fence_regs<128>(o);
      if (ja + 2 < w.ntiles) {
        load_part(ja + 2, st0, 4, 8, true, bar(0, 1), sa);
#pragma unroll
        for (int k = 0; k < 4; ++k) sa[k] = fetch_slot(ja + 4, rr + 16 * k);
      }
      // ---- next pair's S_b' ----
      if constexpr (NXT.value) {
        mbar_wait(bar(1, 0), par ^ 1);
        mbar_wait(bar(1, 1), par ^ 1);
        fence_proxy_async();
        wgmma_fence();
        issue_s<0, 9>(sc, sQ, st1);
        wgmma_commit();
        wgmma_wait<0>();
        fence_regs<32>(sc);
      }
    };
    if (w.ntiles > 1) {
      mbar_wait(bar(1, 0), 0);
      mbar_wait(bar(1, 1), 0);
      fence_proxy_async();
      wgmma_fence();
      issue_s<0, 9>(sc, sQ, st1);
      wgmma_commit();
      wgmma_wait<0>();
      fence_regs<32>(sc);
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
