// Torch binding of the DSA verify kernels. Argument checks (shapes, dtypes, strides, devices)
// are done in Python (kernels/dsa_verify/api.py) with ValueErrors naming the argument; the
// TORCH_CHECKs here are a second line of defence only.
#include <torch/extension.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <optional>

#include "dsa_verify_launch.h"
#include "dsa_verify_params.h"

namespace {

void fwd_impl(const at::Tensor& q, const at::Tensor& kv, const at::Tensor& idx, const at::Tensor& seq_lens,
              at::Tensor& o, const std::optional<at::Tensor>& lse, int64_t fp8, int64_t num_splits, int64_t chunk,
              int64_t cfg, double scale_log2, const std::optional<at::Tensor>& workspace, int64_t early_trigger,
              int64_t cluster, int64_t combine_wide, const at::Tensor* trace) {
  TORCH_CHECK(q.is_cuda() && q.scalar_type() == at::kBFloat16, "q must be a CUDA bf16 tensor");
  TORCH_CHECK(dsav::config_compiled((int)cfg), "tile config not compiled into this module");
  const c10::cuda::CUDAGuard guard(q.device());
  dsav::Params p{};
  p.q = reinterpret_cast<const __nv_bfloat16*>(q.data_ptr());
  p.q_st = q.stride(0);
  p.q_sh = q.stride(1);
  p.kv = reinterpret_cast<const uint8_t*>(kv.data_ptr());
  p.kv_st = kv.stride(0) * (int64_t)kv.element_size();
  p.num_slots = kv.size(0);
  p.idx = idx.data_ptr<int32_t>();
  p.idx_st = idx.stride(0);
  p.seq_lens = seq_lens.data_ptr<int32_t>();
  p.o = reinterpret_cast<__nv_bfloat16*>(o.data_ptr());
  p.o_st = o.stride(0);
  p.o_sh = o.stride(1);
  p.lse = (lse.has_value() && lse->defined()) ? lse->data_ptr<float>() : nullptr;
  p.T = (int)q.size(0);
  p.H = (int)q.size(1);
  p.topk = (int)idx.size(1);
  p.S = (int)num_splits;
  p.chunk = (int)chunk;
  p.scale_log2 = (float)scale_log2;
  p.early_trigger = (int)early_trigger;
  p.cluster = (int)cluster;
  p.combine_wide = (int)(combine_wide != 0);
  if (p.S > 1 && !p.cluster) {
    TORCH_CHECK(workspace.has_value() && workspace->defined(), "workspace required when num_splits > 1");
    const int64_t rows = (int64_t)p.T * p.H;
    TORCH_CHECK(workspace->numel() >= p.S * rows * 513, "workspace too small");
    float* ws = workspace->data_ptr<float>();
    p.ws_o = ws;
    p.ws_lse = ws + p.S * rows * 512;
  }
#ifdef DSAV_TRACE
  p.trace = nullptr;
  p.trace_split_ctas = 0;
  if (trace) {
    TORCH_CHECK(trace->is_cuda() && trace->scalar_type() == at::kLong && trace->is_contiguous(),
                "trace must be a contiguous CUDA int64 tensor");
    const int64_t bm = dsav::config_block_m((int)cfg);
    const int64_t split_ctas = (int64_t)p.T * p.S * ((p.H + bm - 1) / bm);
    const int64_t combine_ctas = (p.S > 1 && !p.cluster) ? (int64_t)dsav::combine_blocks((long long)p.T * p.H, p.combine_wide) : 0;
    TORCH_CHECK(trace->numel() >= 8 * (split_ctas + combine_ctas), "trace too small");
    p.trace = reinterpret_cast<unsigned long long*>(trace->data_ptr<int64_t>());
    p.trace_split_ctas = split_ctas;
  }
#else
  TORCH_CHECK(trace == nullptr, "a trace needs the DSAV_TRACE build");
#endif
  cudaError_t e = dsav::launch(p, (int)cfg, fp8 != 0, c10::cuda::getCurrentCUDAStream().stream());
  TORCH_CHECK(e == cudaSuccess, "dsa_verify launch failed: ", cudaGetErrorString(e));
}

void fwd(const at::Tensor& q, const at::Tensor& kv, const at::Tensor& idx, const at::Tensor& seq_lens,
         at::Tensor& o, const std::optional<at::Tensor>& lse, int64_t fp8, int64_t num_splits, int64_t chunk,
         int64_t cfg, double scale_log2, const std::optional<at::Tensor>& workspace, int64_t early_trigger,
         int64_t cluster, int64_t combine_wide) {
  fwd_impl(q, kv, idx, seq_lens, o, lse, fp8, num_splits, chunk, cfg, scale_log2, workspace, early_trigger, cluster,
           combine_wide, nullptr);
}

#ifdef DSAV_TRACE
void fwd_trace(const at::Tensor& q, const at::Tensor& kv, const at::Tensor& idx, const at::Tensor& seq_lens,
               at::Tensor& o, const std::optional<at::Tensor>& lse, int64_t fp8, int64_t num_splits, int64_t chunk,
               int64_t cfg, double scale_log2, const std::optional<at::Tensor>& workspace, int64_t early_trigger,
               int64_t cluster, int64_t combine_wide, const at::Tensor& trace) {
  fwd_impl(q, kv, idx, seq_lens, o, lse, fp8, num_splits, chunk, cfg, scale_log2, workspace, early_trigger, cluster,
           combine_wide, &trace);
}
#endif

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("fwd", &fwd, "DSA (sparse MLA) verify attention forward (writes o, and lse if given)");
#ifdef DSAV_TRACE
  m.def("fwd_trace", &fwd_trace, "fwd plus the per-CTA %globaltimer timeline (diagnostic build)");
#endif
  m.def("config_smem_bytes", &dsav::config_smem_bytes, "dynamic smem bytes of a tile config");
  m.def("config_block_m", &dsav::config_block_m, "heads per CTA of a tile config");
  m.def("config_compiled", &dsav::config_compiled, "whether a tile config is in this module");
  m.def("config_ctas_per_sm", &dsav::config_ctas_per_sm, "resident CTAs per SM on the current device");
  m.def("config_max_clusters", &dsav::config_max_clusters, "resident clusters of a size (0: cannot launch)");
  m.def("set_sm120_occupancy", &dsav::set_sm120_occupancy,
        "experimental build: pad each kernel's smem to the CTAs per SM of an SM with (smem, reserved per "
        "block) bytes; 0 = off (False: not in this build)");
}
