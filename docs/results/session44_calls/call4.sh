#!/usr/bin/env bash
# Session 44, call 4 (no carry, ~280 s): bash docs/results/session44_calls/call4.sh
# The shipped tree (the checkout: the warp-specialized fp8 kernel with ASYM consumers for every flag-2 call).
# /tmp/asym1 = the checkout with both fp8 instances launched (ASYM at >= 1 CTA, MODE 0 otherwise: never), the module
# calls 2 and 3 measured (compiled here, every kernel's .text byte-identical to that build's; in the shipped module,
# where the ASYM instance is alone, nvcc schedules 140 of its instructions otherwise): A/B named base, so bitwise
# equality is checked.
# 1. A/B fp8 cache, f16 path, shipped vs the measured build; 2. the GPU tests of the fp8 arithmetics (incl. the
# rewritten test_warp_specialized_fp8_kernel_matches_the_f16_kernel); 3. parity of every fp8 case and the fp8 graph
# case on the shipped tree; 4. the phase-2 bench at (4, 131072, 4, 16) with its fp8 rows (fp8 / bf16 in one run).
set -o pipefail
. tests/device/call_budget.sh 280  # R, L, left, say, lim
. tests/device/call_steps.sh       # build_trees
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader | tee -a "$L"
C=$MLAV_CSRC
rm -rf /tmp/asym1 && cp -r $C /tmp/asym1
python3 - /tmp/asym1/mla_verify.cu <<'PY' || { echo "trees wrong" | tee -a "$L"; exit 4; }
import sys
p = sys.argv[1]
s = open(p).read()
a = """  if (p.fp8_f16 == 2)
    return launch_ws_kernel<wg::mla_verify_split_wgmma_ws_fp8_kernel<MLAV_WS_FP8_ASYM != 0>>(p, m_tiles, stream);"""
b = """  if (p.fp8_f16 == 2) {
    if ((long long)m_tiles * p.B >= 1)
      return launch_ws_kernel<wg::mla_verify_split_wgmma_ws_fp8_kernel<true>>(p, m_tiles, stream);
    return launch_ws_kernel<wg::mla_verify_split_wgmma_ws_fp8_kernel<false>>(p, m_tiles, stream);
  }"""
assert s.count(a) == 1
open(p, "w").write(s.replace(a, b))
PY
build_trees asym1
say built
cd kernels || exit 2
timeout "$(lim 70)" python3 -m verify_tools.bench --tree-ab base=/tmp/asym1 --ab-kv fp8 --ab-fp8-paths f16 --ab-reps 2 \
  --ab-gb-trees none --shapes 4:131072:4:16,8:32768:8:16 --ab-out "$OUT/ab_ship.json" >/dev/null 2>>"$OUT/ab_err.txt"
echo "ab rc=$?" | tee -a "$L"
python3 -m verify_tools.bench --ab-summary "$OUT/ab_ship.json" 2>&1 | grep -v cupti | tee -a "$L"
say ab
timeout "$(lim 40)" python3 -m pytest -q -p no:cacheprovider -m gpu "$R/tests/kernels/test_kernel_gpu_parity.py" \
  -k "fp8" 2>&1 | tail -4 | tee -a "$L"
FP8C=fp8_seed_b1_prefix65k_n8_h16_chain,fp8_b4_varlen_tree_h16_u8,fp8_b2_n16_h128_tree_scales,fp8_b32_chain_n8_h16_prefix1k
timeout "$(lim 60)" python3 -m verify_tools.parity --cases $FP8C,fp8_b8_long_splits_ws_h16,fp8_codes_exact,graph_fp8_b2_n8_h16 \
  --configs sm90wg --json > "$OUT/parity_ship.json" 2>>"$OUT/parity_err.txt"
echo "parity rc=$?" | tee -a "$L"
python3 -c "import json, sys; d = json.load(open(sys.argv[1])); print('parity', d.get('ok'), d.get('summary'))" \
  "$OUT/parity_ship.json" 2>&1 | tee -a "$L"
say parity
timeout "$(lim 80)" python3 -m verify_tools.bench --json --no-sglang --no-flashmla --fp8 --shapes 4:131072:4:16 \
  > "$OUT/bench.json" 2>>"$OUT/bench_err.txt"
echo "bench rc=$?" | tee -a "$L"
grep '^\[bench\]' "$OUT/bench_err.txt" | tee -a "$L"
say done
