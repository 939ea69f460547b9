// Kernel parameter block shared by the CUDA kernels and the (host-compiled) torch binding.
#pragma once
#include <cuda_bf16.h>
#include <stdint.h>

namespace mlav {

struct Params {
  const __nv_bfloat16* q; int64_t q_st, q_sh;
  const __nv_bfloat16* kext; int64_t ke_st;
  const __nv_bfloat16* vext; int64_t ve_st;
  __nv_bfloat16* o; int64_t o_st, o_sh;
  const __nv_bfloat16* kbuf; int64_t kb_st; int64_t num_slots;  // bf16 cache (kv_fp8 = 0)
  const uint8_t* kbuf8;  // fp8 e4m3fn cache (kv_fp8 = 1): same row layout, 1 byte per dim, stride kb_st bytes
  int kv_fp8;            // 1: prefix rows are fp8, dequantized to bf16 in the loader
  float k_scale;         // fp8: prefix logits use scale_log2 * k_scale (draft rows are bf16, unscaled)
  float v_scale;         // fp8: prefix P is multiplied by v_scale before the PV product
  int fp8_sched;         // fp8 wgmma loader schedule (mla_verify_wgmma.cuh): 0, 1 or 2
  int fp8_f16;           // fp8 wgmma: 1 the prefix tiles as f16 wgmmas (mla_verify_wgmma.cuh, F16), 2 the same in the
                        // warp-specialized fp8 kernel (mla_verify_wgmma_ws_fp8.cuh), 0 the bf16 decode; CUDA-graph
                        // captures: 3 the bf16 decode and the warp-specialized kernel, 4 the F16 kernel and it, each
                        // gated (fp8_gate)
  const void* qo_indptr; const void* kv_indptr; const void* mask_indptr;
  const int64_t* kv_indices; int64_t n_kv_indices;
  const uint8_t* mask; int64_t mask_numel;
  int qo_is64, kv_is64, mi_is64;
  int mask_mode;   // 0 custom (FULL layout), 1 causal over draft tokens, 2 no draft mask
  int v_alias;     // 1: v_extend rows == first 512 dims of k_extend rows (skip V reload)
  int B, T, H, S;  // batch, tokens, heads, prefix splits of the grid (the workspace is sized for S)
  // Split count actually run (mla_verify_kernel.cuh, effective_splits). split_auto = 0: S. 1: the
  // host's exact-length rule (mla_verify/api.py, choose_num_splits) evaluated on the device from
  // the real prefix total kv_indptr[B] - kv_indptr[0], clamped to S: a CUDA graph captured with
  // max-sized index buffers runs, at each replay, the split count of an eager call at that length.
  int split_auto;
  int rule_s_cap;         // min(SM slots // CTAs per split, MAX_SPLITS); 1 when the grid fills the GPU
  int rule_draft_tiles;   // ceil(max_len_extend / rule_bn): draft tiles of the last split
  int rule_bn;            // KV tile tokens of the config the host rule was evaluated for
  int64_t rule_part_div;  // B * max_len_extend * H * 513 * 4 * 2: fp32 partial bytes per split
  int pdl_early;          // 1: split CTAs execute griddepcontrol.launch_dependents at their start
  float scale_log2;
  int part_bf16;        // 1: ws_o holds bf16 partials [S, T*H, 512] (the warp-specialized kernel's staged epilogue,
                        // MLAV_PART_BF16 builds; set by launch()), read by the combine as such; 0: fp32
  float* ws_o;          // [S, T*H, 512] fp32 normalized partial outputs (S > 1 only; bf16 where part_bf16)
  float* ws_lse;        // [S, T*H] fp32 log2-sum-exp of each partial (-inf: empty)
  int fp8_gate;         // set by launch() for fp8_f16 3 and 4: 1 this grid (the first) runs only where a split's
                        // prefix chunk holds fewer than fp8_ws_min tokens, 2 (the warp-specialized kernel) only where
                        // it holds at least that many (mla_verify_kernel.cuh, fp8_gate_shut); 0 no gate
  int fp8_ws_min;       // tiles.TileConfig.fp8_ws_min_tokens (MLAV_WS_FP8_MIN_TOKENS, mla_verify.cu)
};

}  // namespace mlav
