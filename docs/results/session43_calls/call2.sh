#!/usr/bin/env bash
# Session 43, call 2 (no carry, nvidia-h100-x1): the warp-specialized fp8 kernel (mla_verify_wgmma_ws_fp8.cuh, the
# f16 arithmetic: p.fp8_f16 = 1) in the checkout ("cur"; MLAV_WS_FP8=1), /tmp/base = the same csrc with
# MLAV_WS_FP8=0 (the F16 kernel of mla_verify_wgmma.cuh, as shipped before this session).
# Cut to the device time left after the session's refused starts (CALL_BUDGET_S=240):
# 1. A/B fp8 cache, each tree x fp8_path bf16, f16 (cur/bf16 and base/bf16 are the same kernel), 2 interleaved reps;
# 2. two shapes with the bf16 cache (cur and base: the same bf16 kernels), for fp8 / bf16 (a second process);
# 3. parity of every fp8 case on sm90wg (each runs both arithmetics: f16 is the new kernel), the fp8 graph case;
# 4. racecheck, synccheck on an fp8 case (sm90wg, both paths), as the budget allows.
# Keep rule: cur/f16 bitwise equal to base/f16 on every row, parity passing, sanitizers clean, and cur/f16 faster
# than the arithmetic graphs run today (base/bf16) on the memory-floored shape (4, 131072, 4, 16).
set -o pipefail
. tests/device/call_budget.sh 240  # R, L, left, say, lim
. tests/device/call_steps.sh       # build_trees
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader | tee -a "$L"
C=$MLAV_CSRC
rm -rf /tmp/base && cp -r $C /tmp/base && { echo "#define MLAV_WS_FP8 0"; cat $C/mla_verify.cu; } > /tmp/base/mla_verify.cu
build_trees base
say built
cd kernels || exit 2
SH=4:131072:4:16,8:32768:8:16,1:32768:8:16,1:4096:8:16,32:8192:8:16
timeout "$(lim 90)" python3 -m verify_tools.bench --tree-ab base=/tmp/base --ab-kv fp8 --ab-fp8-paths bf16,f16 \
  --ab-reps 2 --ab-gb-trees none --shapes $SH --ab-out "$OUT/ab_fp8.json" >/dev/null 2>>"$OUT/ab_err.txt"
echo "ab fp8 rc=$?" | tee -a "$L"
python3 -m verify_tools.bench --ab-summary "$OUT/ab_fp8.json" 2>&1 | tee -a "$L"
say "ab fp8"
timeout "$(lim 25)" python3 -m verify_tools.bench --tree-ab base=/tmp/base --ab-kv bf16 --ab-reps 1 \
  --ab-gb-trees none --shapes 4:131072:4:16,8:32768:8:16 --ab-out "$OUT/ab_bf16.json" >/dev/null 2>>"$OUT/ab_err.txt"
echo "ab bf16 rc=$?" | tee -a "$L"
python3 -m verify_tools.bench --ab-summary "$OUT/ab_bf16.json" 2>&1 | tee -a "$L"
say "ab bf16"
FP8C=fp8_seed_b1_prefix65k_n8_h16_chain,fp8_b4_varlen_tree_h16_u8,fp8_b2_n16_h128_tree_scales,fp8_b32_chain_n8_h16_prefix1k
timeout "$(lim 60)" python3 -m verify_tools.parity --cases $FP8C,fp8_codes_exact,graph_fp8_b2_n8_h16 --configs sm90wg \
  --json > "$OUT/parity_fp8.json" 2>>"$OUT/parity_err.txt"
echo "parity fp8 rc=$?" | tee -a "$L"
python3 -c "import json, sys; d = json.load(open(sys.argv[1])); print('parity', d.get('ok'), d.get('summary'))" \
  "$OUT/parity_fp8.json" 2>&1 | tee -a "$L"
say parity
for tool in racecheck synccheck; do
  t=$(lim 60); [ "$t" -lt 25 ] && { echo "SKIP $tool: budget" | tee -a "$L"; continue; }
  timeout "$t" compute-sanitizer --tool $tool --kernel-name kns=mla_verify --print-limit 20 \
    --log-file "$OUT/san_$tool.log" python3 -m verify_tools.parity --cases fp8_b4_varlen_tree_h16_u8 \
    --configs sm90wg --json > "$OUT/san_$tool.out" 2>&1
  echo "$tool rc=$?" | tee -a "$L"
  tail -2 "$OUT/san_$tool.log" | tee -a "$L"
done
say done
