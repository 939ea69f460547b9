#!/usr/bin/env bash
# Session 21 call 3: where the warp-specialized kernel's consumers lose what S gains (call 2's trace: S -286 cycles
# per tile, wait/softmax/PV +437 at B=8 L=32k): Nsight Compute of the ws kernel (/tmp/ws/csrc = the checkout's csrc
# with MLAV_WS=1) and the shipped one at 8:32768:8:16 bf16, stall reasons and per-SASS source counters; then the
# checks session 20's shipped change never got (session20_calls/next_call1.sh): racecheck on two bf16 cases of
# sm90wg and the dense + DSA GPU pytest. Run from the repository root, no carry.
set -o pipefail
export ORCHESTRATOR_KERNEL_CACHE=/tmp/kc MAX_JOBS=16 PYTHONUNBUFFERED=1
R=$PWD; L=$OUT/log.txt; say() { echo "== $* ($(date +%T), ${SECONDS}s)" | tee -a "$L"; }
rm -rf /tmp/ws && mkdir -p /tmp/ws && cp -r kernels/mla_verify/csrc /tmp/ws/csrc
sed -i 's/#define MLAV_WS 0/#define MLAV_WS 1/' /tmp/ws/csrc/mla_verify.cu
export PYTHONPATH=$R/kernels:$R
python3 -c "from mla_verify._build import load; load('sm_90a')" >>"$L" 2>&1 &
python3 -c "from verify_tools.bench import load_tree; load_tree('sm_90a', '/tmp/ws/csrc')" >>"$L" 2>&1 &
wait; say built
cd kernels || exit 2
for t in shipped ws; do
  c=""; [ $t = ws ] && c=/tmp/ws/csrc
  timeout 120 ncu --clock-control none -k regex:split_wgmma --launch-skip 2 --launch-count 1 \
    --section SpeedOfLight --section WarpStateStats --section InstructionStats --section SchedulerStats \
    python3 $R/tests/device/dense_ncu.py 8:32768:8:16 sm90wg $c > $OUT/ncu_$t.txt 2>&1
  echo "ncu $t rc=$?" | tee -a "$L"
  grep -E "Duration|Issue Slots|Eligible|Stall|Executed Ipc|Registers|Warp Cycles|Executed Instructions " $OUT/ncu_$t.txt | head -24 | tee -a "$L"
  timeout 120 ncu --clock-control none -k regex:split_wgmma --launch-skip 2 --launch-count 1 --section SourceCounters \
    --page source --print-source sass --csv python3 $R/tests/device/dense_ncu.py 8:32768:8:16 sm90wg $c > /tmp/src.csv 2>&1
  echo "ncu src $t rc=$? $(wc -l < /tmp/src.csv) lines" | tee -a "$L"
  gzip -c /tmp/src.csv > $OUT/ncu_src_$t.csv.gz
done
say ncu
for c in b4_varlen_tree_h16 b2_causal_nomask_h64; do
  timeout 150 compute-sanitizer --tool racecheck --print-limit 4 --log-file /tmp/san.log python3 -m verify_tools.parity --json --configs sm90wg --cases $c > /tmp/san.json 2>/dev/null
  echo "racecheck shipped $c rc=$? | $(grep -v '^=========     ' /tmp/san.log | head -3 | tr '\n' ' ' | cut -c1-300) | $(python3 -c "import json; d=json.load(open('/tmp/san.json')); print([(x['name'], x['ok']) for x in d['cases']])" 2>&1)" | tee -a "$L"
done
cd "$R" || exit 2
timeout 200 python3 -m pytest -q -p no:cacheprovider tests/kernels/test_kernel_gpu_parity.py tests/kernels/test_dsa_gpu.py 2>&1 | tail -3 | tee -a "$L"
say done
