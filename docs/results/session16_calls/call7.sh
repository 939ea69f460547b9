#!/usr/bin/env bash
# Prepared in session 16 (not run: the device budget was spent): why call 6's f16 fp8 path (call6_f16_path.diff)
# was 1.10x slower per tile with ~20M fewer decode instructions. Nsight Compute of the wgmma fp8 split kernel at
# (4, 131072, 4, 16), shipped tree (this checkout) against the patched copy (/tmp/f16/...): speed of light, warp
# states, instruction mix, pipe utilization (ComputeWorkloadAnalysis), scheduler stats; source counters of the
# patched kernel (no_instruction stalls = the doubled loop's footprint; math/mio stalls on F2FP = the conversion
# pipe). Then call7_kf_zero.diff (the wgmma fp8 store zeroes an unreadable row by multiplying its decode by 0
# instead of 36 SELs per store: 105 fewer SASS instructions, registers 251 -> 255, 0 spills; the other kernels'
# SASS unchanged) applied to this checkout: A/B against the shipped tree, fp8 parity, memcheck.
# Run from the repository root with $OUT set (no carry); ~6 min.
set -o pipefail
export ORCHESTRATOR_KERNEL_CACHE=/tmp/kc MAX_JOBS=16 PYTHONUNBUFFERED=1
R=$PWD; L=$OUT/log.txt; say() { echo "== $* ($(date +%T), ${SECONDS}s)" | tee -a "$L"; }
rm -rf /tmp/f16 /tmp/base && mkdir -p /tmp/f16/kernels/mla_verify /tmp/base && cp -r kernels/mla_verify/csrc /tmp/f16/kernels/mla_verify/
cp -r kernels/mla_verify/csrc /tmp/base/csrc
(cd /tmp/f16 && git apply --include='kernels/mla_verify/csrc/*' "$R/docs/results/session16_calls/call6_f16_path.diff") || { echo "patch did not apply" | tee -a "$L"; exit 2; }
cd kernels || exit 2
export PYTHONPATH=$PWD:$R
F=/tmp/f16/kernels/mla_verify/csrc
python3 -c "from mla_verify._build import load; load('sm_90a')" >>"$L" 2>&1 &
python3 -c "from verify_tools.bench import load_tree; load_tree('sm_90a', '$F')" >>"$L" 2>&1 &
wait; say built
S="--section SpeedOfLight --section WarpStateStats --section InstructionStats --section ComputeWorkloadAnalysis --section SchedulerStats"
for t in shipped f16; do
  d=""; [ $t = f16 ] && d=$F
  timeout 120 ncu --clock-control none -k regex:split_wgmma --launch-skip 2 --launch-count 1 $S \
    python3 $R/tests/device/dense_ncu.py 4:131072:4:16 sm90wg $d --fp8 > $OUT/ncu_$t.txt 2>&1
  echo "ncu $t rc=$?" | tee -a "$L"
  grep -E "Duration|Issue Slots Busy|Executed Ipc A|No Eligible|Warp Cycles Per Issued|Pipe|pipe" $OUT/ncu_$t.txt | head -20 | tee -a "$L"
done
timeout 120 ncu --clock-control none -k regex:split_wgmma --launch-skip 2 --launch-count 1 --section SourceCounters \
  --page source --print-source sass --csv python3 $R/tests/device/dense_ncu.py 4:131072:4:16 sm90wg $F --fp8 > /tmp/src.csv 2>&1
echo "ncu src rc=$? $(wc -l < /tmp/src.csv) lines" | tee -a "$L"
gzip -c /tmp/src.csv > $OUT/ncu_src_f16.csv.gz
say "kf zeroing: A/B, parity, memcheck"
(cd "$R" && git apply docs/results/session16_calls/call7_kf_zero.diff) 2>>"$L"  # paths from the repository root
echo "kf applied: $(grep -c 'const uint32_t kf = f8_ok' mla_verify/csrc/mla_verify_wgmma.cuh)" | tee -a "$L"
python3 -c "from mla_verify._build import load; load('sm_90a')" >>"$L" 2>&1 &
python3 -c "from verify_tools.bench import load_tree; load_tree('sm_90a', '/tmp/base/csrc')" >>"$L" 2>&1 &
wait
timeout 150 python3 -m verify_tools.bench --tree-ab base=/tmp/base/csrc --ab-kv fp8 --ab-gb-trees none --ab-reps 3 --ab-configs sm90wg \
  --shapes 4:131072:4:16,8:32768:8:16,32:8192:8:16,1:32768:8:16,1:4096:8:16 --ab-out "$OUT/ab_kf.json" >/dev/null 2>>"$L"
echo "ab rc=$?" | tee -a "$L"
python3 - "$OUT/ab_kf.json" <<'PY' 2>&1 | tee -a "$L"
import json, sys
d = json.load(open(sys.argv[1]))
for r in d["ab"]:
    print(f"B={r['B']} L={r['L']} n={r['n']} H={r['H']}: us {r['us']} over base {r.get('ratio_over_base')} bitwise {r.get('bitwise_equal_base')}")
PY
timeout 120 python3 -m verify_tools.parity --json --configs all \
  --cases fp8_seed_b1_prefix65k_n8_h16_chain,fp8_b4_varlen_tree_h16_u8,fp8_b2_n16_h128_tree_scales,fp8_b32_chain_n8_h16_prefix1k,fp8_codes_exact,graph_fp8_b2_n8_h16 \
  > "$OUT/parity_kf.json" 2>/dev/null; echo "parity rc=$?" | tee -a "$L"
python3 -c "import json; d=json.load(open('$OUT/parity_kf.json')); print(d.get('summary'))" 2>&1 | tee -a "$L"
timeout 80 compute-sanitizer --tool memcheck --print-limit 4 --log-file /tmp/san.log python3 -m verify_tools.parity --json --configs sm90wg --cases fp8_b4_varlen_tree_h16_u8 > /tmp/san.json 2>/dev/null
echo "memcheck rc=$? | $(grep -v '^=========     ' /tmp/san.log | head -3 | tr '\n' ' ' | cut -c1-300)" | tee -a "$L"
say done
