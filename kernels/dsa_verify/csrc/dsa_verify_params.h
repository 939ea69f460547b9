// Parameter block of the sparse (DSA) MLA verify kernels, shared with the torch binding.
#pragma once
#include <cuda_bf16.h>
#include <stdint.h>

namespace dsav {

struct Params {
  const __nv_bfloat16* q; int64_t q_st, q_sh;   // [T, H, 576] bf16, strides in elements
  const uint8_t* kv; int64_t kv_st;              // cache rows, row stride in BYTES
  int64_t num_slots;                             // rows of the cache (slot ids >= this are skipped)
  const int32_t* idx; int64_t idx_st;            // page_table_1 [T, topk] int32 physical slots
  const int32_t* seq_lens;                       // [T] valid entries per row (clamped to [0, topk])
  __nv_bfloat16* o; int64_t o_st, o_sh;          // [T, H, 512] bf16
  float* lse;                                    // [T, H] natural-log LSE (nullptr: not written)
  int T, H, topk, S, chunk;                      // rows, heads, index width, splits, positions per split
  float scale_log2;                              // sm_scale * log2(e)
  int early_trigger;                             // 1: split grid fits one wave, trigger the combine launch early
  int combine_wide;                              // 1: the wide combine kernel (one warp per (row, head)),
                                                 // 0: the sliced one (16 warps of 32 dims per (row, head))
  float* ws_o;                                   // [S, T*H, 512] fp32 normalized partials (S > 1)
  float* ws_lse;                                 // [S, T*H] fp32 log2-sum-exp partials (-inf: empty)
#ifdef DSAV_TRACE
  unsigned long long* trace;                     // diagnostic build only: 8 %globaltimer / info words per CTA
  long long trace_split_ctas;                    // split CTAs (the combine CTAs' words follow theirs)
#endif
  int cluster;                                   // S (2/4/8/16): the S splits of a (row, head tile) form one
                                                 // thread-block cluster and merge in DSMEM (no workspace,
                                                 // no combine kernel); 0: workspace + combine kernel
};

}  // namespace dsav
