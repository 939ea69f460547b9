#!/usr/bin/env bash
# Ran 23:42-23:44 UTC (H100) on the working tree of 9e4d2a8 (a stash commit), where the gated pair was every fp8
# capture's default; the committed form makes it opt-in (mla_verify_fwd fp8_graph_gate, parity GATED_GRAPH_CASES).
# Session 48 call 2 (~320 s, no carry): GSEL, fp8 calls captured into CUDA graphs (api.fp8_f16 flags 3 and 4: the bf16
# decode or the F16 kernel, then the warp-specialized fp8 kernel as its programmatic dependent, each CTA gated by the
# replayed length). /tmp/base = the checkout without GSEL (gsel_rev.patch = the csrc diff reversed).
# 1. parity: the new graph case (replays on both sides of 2,048 tokens a split, the threshold itself, empty, hostile),
#    the old fp8 graph case and every eager fp8 case, paths auto / bf16 / f16;
# 2. the GPU pytest of the binding's tables (config_fp8_ws_min_tokens) and the fp8 kernels;
# 3. A/B base vs checkout, fp8 cache, graph replays of "auto" (base: the bf16 decode) and "f16" (base: the ws kernel
#    alone), bitwise against base;
# 4. graph-buffer rows with the fp8 cache (max-sized buffers: the gated pair at every length) vs exact-size captures;
# 5. memcheck on the new graph case.
# Prediction: auto / base at (4, 131072, 4, 16) 0.82-0.86 (the eager ratio, session 47: 0.825); "f16" 1.00-1.01
# (bitwise); fp8 graph-buffer rows <= 1.1 with the short lengths paying the shut kernel (~1 us).
set -o pipefail
. tests/device/call_budget.sh 320  # R, L, left, say, lim
. tests/device/call_steps.sh       # patched, build_trees, ab, parity_cases, san_case
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader | tee -a "$L"
patched base docs/results/session48_calls/gsel_rev.patch
build_trees base
say built
cd kernels || exit 2
parity_cases gsel 90 graph_fp8_ws_b1_n8_h64,graph_fp8_b2_n8_h16,$FP8_CASES
say parity
timeout "$(lim 50)" python3 -m pytest -q -p no:cacheprovider -m gpu "$R/tests/kernels/test_kernel_gpu_parity.py" \
  -k "binding_smem or fp8" 2>&1 | tail -4 | tee -a "$L"
say pytest
ab gsel 90 base=/tmp/base --ab-kv fp8 --ab-fp8-paths auto,f16 --ab-reps 3 --ab-gb-trees none \
  --shapes 4:131072:4:16,8:32768:8:16,1:131072:8:16,1:32768:8:16
say ab
timeout "$(lim 70)" python3 -m verify_tools.bench --json --no-sglang --no-flashmla --shapes 1:4096:8:16 --graph-buffer \
  --gb-kv fp8 > "$OUT/bench_gb.json" 2>>"$OUT/bench_gb_err.txt"
echo "bench gb rc=$?" | tee -a "$L"
grep '^\[bench\] graph-buffer' "$OUT/bench_gb_err.txt" | cut -c1-230 | tee -a "$L"
san_case memcheck graph_fp8_ws_b1_n8_h64
say done
