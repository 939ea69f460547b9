#!/usr/bin/env bash
# Session 17 call 5: why the f16 fp8 kernel loses at B=1 L=4k (26.9-28.9 vs 22.7 us). Trees (each its own kernels/
# dir): main (7a49384), v2 (7330ca2: the standalone f16 kernel), v3 (v2 with the Q conversion's loops not unrolled,
# 320 fewer SASS instructions). Nsight Compute of the split kernel at (1, 4096, 8, 16) fp8 for main and v3; fp8 A/B
# from tree_v3 (cur = v3) against main and v2; fp8 parity of v3.
# Run record. Carry .calls: tree_main = `git archive 7a49384 kernels`, tree_v2 = 7330ca2's kernels/, tree_v3 =
# 7a49384's kernels/ + f16_v3.diff.
set -o pipefail
export MAX_JOBS=16 PYTHONUNBUFFERED=1
R=$PWD; L=$OUT/log.txt; say() { echo "== $* ($(date +%T), ${SECONDS}s)" | tee -a "$L"; }
env_of() { export ORCHESTRATOR_KERNEL_CACHE=/tmp/kc_$1 PYTHONPATH=$R/.calls/tree_$1/kernels:$R; cd $R/.calls/tree_$1/kernels; }
for t in main v2 v3; do (env_of $t && python3 -c "from mla_verify._build import load; load('sm_90a')") >>"$L" 2>&1 & done
wait; say built
S="--section SpeedOfLight --section WarpStateStats --section InstructionStats --section SchedulerStats --section SourceCounters"
for t in main v3; do
  (env_of $t && timeout 90 ncu --clock-control none -k regex:split_wgmma --launch-skip 2 --launch-count 2 $S --csv \
     python3 $R/tests/device/dense_ncu.py 1:4096:8:16 sm90wg --fp8 > $OUT/ncu_${t}_b1_4k.csv 2>&1; echo "ncu $t rc=$?") | tee -a "$L"
  (env_of $t && timeout 90 ncu --clock-control none -k regex:split_wgmma --launch-skip 2 --launch-count 1 --section SourceCounters --page source --print-source sass --csv \
     python3 $R/tests/device/dense_ncu.py 1:4096:8:16 sm90wg --fp8 2>&1 | gzip > $OUT/ncu_src_${t}_b1_4k.csv.gz; echo "src $t rc=$?") | tee -a "$L"
done
say "A/B (cur = v3)"
(env_of v3 && timeout 150 python3 -m verify_tools.bench --tree-ab base=$R/.calls/tree_main/kernels/mla_verify/csrc,v2=$R/.calls/tree_v2/kernels/mla_verify/csrc \
   --ab-kv fp8 --ab-gb-trees none --ab-reps 3 --ab-configs sm90wg --shapes 1:4096:8:16,1:8192:8:16,1:32768:8:16,4:131072:4:16 \
   --ab-out "$OUT/ab_v3.json" >/dev/null 2>>"$L"; echo "ab rc=$?") | tee -a "$L"
python3 - "$OUT/ab_v3.json" <<'PY' 2>&1 | tee -a "$L"
import json, sys
d = json.load(open(sys.argv[1]))
for r in d["ab"]:
    print(f"B={r['B']} L={r['L']}: us {r['us']} over base {r.get('ratio_over_base')}")
for c in d["cupti"]:
    print("cupti", c["tree"], c["B"], c["L"], c["kernels_us"])
PY
say "parity v3"
(env_of v3 && timeout 100 python3 -m verify_tools.parity --json --configs sm90wg \
  --cases fp8_seed_b1_prefix65k_n8_h16_chain,fp8_b4_varlen_tree_h16_u8,fp8_b2_n16_h128_tree_scales,fp8_b32_chain_n8_h16_prefix1k,fp8_codes_exact,graph_fp8_b2_n8_h16 \
  > "$OUT/parity_v3.json" 2>>"$L"; echo "parity rc=$?") | tee -a "$L"
python3 -c "import json; d=json.load(open('$OUT/parity_v3.json')); print(d.get('summary'))" 2>&1 | tee -a "$L"
say done
