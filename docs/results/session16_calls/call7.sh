#!/usr/bin/env bash
# Prepared in session 16 (not run: the device budget was spent): why call 6's f16 fp8 path (call6_f16_path.diff)
# was 1.10x slower per tile with ~20M fewer decode instructions. Nsight Compute of the wgmma fp8 split kernel at
# (4, 131072, 4, 16), shipped tree (this checkout) against the patched copy (/tmp/f16/...): speed of light, warp
# states, instruction mix, pipe utilization (ComputeWorkloadAnalysis), scheduler stats; source counters of the
# patched kernel (no_instruction stalls = the doubled loop's footprint; math/mio stalls on F2FP = the conversion
# pipe). Run from the repository root with $OUT set (no carry); ~4 min.
set -o pipefail
export ORCHESTRATOR_KERNEL_CACHE=/tmp/kc MAX_JOBS=16 PYTHONUNBUFFERED=1
R=$PWD; L=$OUT/log.txt; say() { echo "== $* ($(date +%T), ${SECONDS}s)" | tee -a "$L"; }
rm -rf /tmp/f16 && mkdir -p /tmp/f16/kernels/mla_verify && cp -r kernels/mla_verify/csrc /tmp/f16/kernels/mla_verify/
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
say done
