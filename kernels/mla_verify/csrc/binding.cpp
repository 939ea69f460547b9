// Torch binding of the MLA verify kernels. Argument checking (shapes, dtypes, strides, devices)
// is done in Python (kernels/mla_verify/api.py) with ValueErrors naming the argument; the
// TORCH_CHECKs here are a second line of defence only.
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAGuard.h>
#include <cstdlib>
#include <optional>

#include "mla_verify_params.h"
#include "mla_verify_launch.h"

namespace {

const void* ptr_or_null(const std::optional<at::Tensor>& t) {
  return (t.has_value() && t->defined()) ? t->data_ptr() : nullptr;
}

void fwd(const at::Tensor& q, const at::Tensor& k_ext, const at::Tensor& v_ext, at::Tensor& o,
         const at::Tensor& k_buf, const at::Tensor& qo_indptr, const at::Tensor& kv_indptr,
         const at::Tensor& kv_indices, const std::optional<at::Tensor>& mask,
         const std::optional<at::Tensor>& mask_indptr, int64_t mask_mode, int64_t v_alias,
         int64_t num_splits, int64_t cfg, int64_t max_len_extend, double scale_log2,
         const std::optional<at::Tensor>& workspace, double k_scale, double v_scale, int64_t fp8_sched,
         int64_t split_auto, int64_t rule_s_cap, int64_t rule_draft_tiles, int64_t rule_bn, int64_t rule_part_div,
         int64_t fp8_f16) {
  TORCH_CHECK(q.is_cuda() && q.scalar_type() == at::kBFloat16, "q_extend must be a CUDA bf16 tensor");
  TORCH_CHECK(mlav::config_compiled((int)cfg), "tile config not compiled into this module");
  TORCH_CHECK(fp8_f16 >= 0 && fp8_f16 <= 4, "fp8_f16 must be 0 to 4");
  TORCH_CHECK(!fp8_f16 || mlav::config_has_fp8_f16((int)cfg), "fp8_f16: this tile config has no f16 fp8 kernel");
  const c10::cuda::CUDAGuard guard(q.device());
  mlav::Params p{};
  p.q = reinterpret_cast<const __nv_bfloat16*>(q.data_ptr());
  p.q_st = q.stride(0); p.q_sh = q.stride(1);
  p.kext = reinterpret_cast<const __nv_bfloat16*>(k_ext.data_ptr()); p.ke_st = k_ext.stride(0);
  p.vext = reinterpret_cast<const __nv_bfloat16*>(v_ext.data_ptr()); p.ve_st = v_ext.stride(0);
  p.o = reinterpret_cast<__nv_bfloat16*>(o.data_ptr()); p.o_st = o.stride(0); p.o_sh = o.stride(1);
  const auto kdt = k_buf.scalar_type();
  TORCH_CHECK(kdt == at::kBFloat16 || kdt == at::kFloat8_e4m3fn || kdt == at::kByte,
              "k_buffer must be bf16 or fp8 e4m3fn (uint8 storage)");
  p.kv_fp8 = kdt != at::kBFloat16;
  p.kbuf = p.kv_fp8 ? nullptr : reinterpret_cast<const __nv_bfloat16*>(k_buf.data_ptr());
  p.kbuf8 = p.kv_fp8 ? reinterpret_cast<const uint8_t*>(k_buf.data_ptr()) : nullptr;
  p.kb_st = k_buf.stride(0);
  p.k_scale = (float)k_scale;
  p.v_scale = (float)v_scale;
  p.fp8_sched = (int)fp8_sched;
  p.fp8_f16 = (int)fp8_f16;
  p.num_slots = k_buf.size(0);
  p.qo_indptr = qo_indptr.data_ptr(); p.qo_is64 = qo_indptr.scalar_type() == at::kLong;
  p.kv_indptr = kv_indptr.data_ptr(); p.kv_is64 = kv_indptr.scalar_type() == at::kLong;
  p.kv_indices = reinterpret_cast<const int64_t*>(kv_indices.data_ptr());
  p.n_kv_indices = kv_indices.numel();
  p.mask = reinterpret_cast<const uint8_t*>(ptr_or_null(mask));
  p.mask_numel = p.mask ? mask->numel() : 0;
  p.mask_indptr = ptr_or_null(mask_indptr);
  p.mi_is64 = p.mask_indptr ? (mask_indptr->scalar_type() == at::kLong) : 0;
  p.mask_mode = (int)mask_mode;
  p.v_alias = (int)v_alias;
  p.B = (int)(qo_indptr.numel() - 1);
  p.T = (int)q.size(0);
  p.H = (int)q.size(1);
  p.S = (int)num_splits;
  p.split_auto = (int)split_auto;
  p.rule_s_cap = (int)rule_s_cap;
  p.rule_draft_tiles = (int)rule_draft_tiles;
  p.rule_bn = (int)rule_bn;
  p.rule_part_div = rule_part_div;
  // MLAV_PDL_EARLY=0 turns the split kernels' early launch_dependents signal off (A/B timing in
  // the bench; read per call, so a CUDA graph keeps the value of its capture).
  const char* pdl = std::getenv("MLAV_PDL_EARLY");
  p.pdl_early = (pdl && pdl[0] == '0') ? 0 : 1;
  TORCH_CHECK(!p.split_auto || (p.rule_bn > 0 && (p.rule_bn & (p.rule_bn - 1)) == 0 && p.rule_part_div > 0 &&
                                 p.rule_s_cap >= 1),
              "split rule parameters out of range");
  p.scale_log2 = (float)scale_log2;
  if (p.S > 1) {
    TORCH_CHECK(workspace.has_value() && workspace->defined(), "workspace required when num_splits > 1");
    const int64_t rows = (int64_t)p.T * p.H;
    TORCH_CHECK(workspace->numel() >= p.S * rows * 513, "workspace too small");
    float* ws = workspace->data_ptr<float>();
    p.ws_o = ws;
    p.ws_lse = ws + p.S * rows * 512;
  }
  cudaError_t e = mlav::launch(p, (int)cfg, (int)max_len_extend, c10::cuda::getCurrentCUDAStream().stream());
  TORCH_CHECK(e == cudaSuccess, "mla_verify launch failed: ", cudaGetErrorString(e));
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
#if MLAV_TRACE
  m.def("trace_take", []() {
    std::vector<unsigned long long> v(64);
    const int n = mlav::trace_take(v.data(), (int)v.size());
    TORCH_CHECK(n >= 0, "trace_take: CUDA error");
    v.resize(n);
    return v;
  }, "diagnostic build: the wgmma split kernel's phase cycle sums since the last call (then zeroed)");
#endif
  m.def("fwd", &fwd, "MLA verify attention forward (writes o in place)");
  m.def("config_smem_bytes", &mlav::config_smem_bytes, "dynamic smem bytes of a tile config");
  m.def("config_block_m", &mlav::config_block_m, "rows per CTA of a tile config");
  m.def("config_compiled", &mlav::config_compiled, "whether a tile config is in this module");
  m.def("config_has_fp8_f16", &mlav::config_has_fp8_f16, "whether a tile config has an f16 fp8 kernel");
  m.def("config_fp8_ws_min_tokens", &mlav::config_fp8_ws_min_tokens,
        "prefix tokens per split from which fp8 calls take the warp-specialized kernel (0: none)");
}
