#!/usr/bin/env bash
# Session 17 call 2: the f16 fp8 path (branch exp-f16: session 16's call6_f16_path.diff on 7a49384, the high
# byte pair named as a b16 half instead of shifted, the next tile's slot loaded after the tile's loads so no move
# waits on it) against main (7a49384, .calls/base_csrc) and main + that slot reorder alone (.calls/reo_csrc):
# fp8 A/B on six shapes, fp8 parity all configs, memcheck + racecheck, Nsight Compute of the f16 kernel.
# Run record. Checkout: 7a49384 + session16_calls/call6_f16_path.diff (3-way) + the next-slot reorder (commit fb723c0,
# not in main); carry .calls: base_csrc = `git archive 7a49384 kernels/mla_verify/csrc`, reo_csrc = that + the reorder.
set -o pipefail
export ORCHESTRATOR_KERNEL_CACHE=/tmp/kc MAX_JOBS=16 PYTHONUNBUFFERED=1
R=$PWD; L=$OUT/log.txt; say() { echo "== $* ($(date +%T), ${SECONDS}s)" | tee -a "$L"; }
cd kernels || exit 2
export PYTHONPATH=$PWD:$R
python3 -c "from mla_verify._build import load; load('sm_90a')" >>"$L" 2>&1 &
python3 -c "from verify_tools.bench import load_tree; load_tree('sm_90a', '$R/.calls/base_csrc')" >>"$L" 2>&1 &
python3 -c "from verify_tools.bench import load_tree; load_tree('sm_90a', '$R/.calls/reo_csrc')" >>"$L" 2>&1 &
wait; say built
timeout 240 python3 -m verify_tools.bench --tree-ab base=$R/.calls/base_csrc,reo=$R/.calls/reo_csrc --ab-kv fp8 --ab-gb-trees none --ab-reps 3 --ab-configs sm90wg \
  --shapes 4:131072:4:16,8:32768:8:16,32:8192:8:16,1:32768:8:16,1:4096:8:16,2:16384:8:128 --ab-out "$OUT/ab_f16.json" >/dev/null 2>>"$L"
echo "ab rc=$?" | tee -a "$L"
python3 - "$OUT/ab_f16.json" <<'PY' 2>&1 | tee -a "$L"
import json, sys
d = json.load(open(sys.argv[1]))
for r in d["ab"]:
    print(f"B={r['B']} L={r['L']} n={r['n']} H={r['H']}: us {r['us']} over base {r.get('ratio_over_base')} bitwise {r.get('bitwise_equal_base')}")
PY
say parity
timeout 150 python3 -m verify_tools.parity --json --configs all \
  --cases fp8_seed_b1_prefix65k_n8_h16_chain,fp8_b4_varlen_tree_h16_u8,fp8_b2_n16_h128_tree_scales,fp8_b32_chain_n8_h16_prefix1k,fp8_codes_exact,graph_fp8_b2_n8_h16 \
  > "$OUT/parity_f16.json" 2>>"$L"; echo "parity rc=$?" | tee -a "$L"
python3 -c "import json; d=json.load(open('$OUT/parity_f16.json')); print(d.get('summary'))" 2>&1 | tee -a "$L"
for tool in memcheck racecheck; do
  timeout 100 compute-sanitizer --tool $tool --print-limit 4 --log-file /tmp/san.log python3 -m verify_tools.parity --json --configs sm90wg --cases fp8_b4_varlen_tree_h16_u8 > /tmp/san.json 2>/dev/null
  echo "$tool rc=$? | $(grep -v '^=========     ' /tmp/san.log | head -3 | tr '\n' ' ' | cut -c1-300)" | tee -a "$L"
done
S="--section SpeedOfLight --section WarpStateStats --section InstructionStats --section ComputeWorkloadAnalysis --section SchedulerStats --section SourceCounters"
timeout 120 ncu --clock-control none -k regex:split_wgmma --launch-skip 2 --launch-count 1 $S \
  python3 $R/tests/device/dense_ncu.py 4:131072:4:16 sm90wg --fp8 > $OUT/ncu_f16.txt 2>&1
echo "ncu rc=$?" | tee -a "$L"
grep -E "Duration|Issue Slots Busy|No Eligible|Warp Cycles Per Issued|Executed Instructions  " $OUT/ncu_f16.txt | head -8 | tee -a "$L"
say done
