#!/usr/bin/env bash
# session 14 call 5: the dense split rule A/B (.calls/s14_dense.sh), then Nsight Compute on w64 (bf16, fp8) at T=256 H=64
set -o pipefail
R=$PWD
bash docs/results/session14_calls/call5_dense.sh
cd $R/kernels
export PYTHONPATH=$PWD:$R PYTHONUNBUFFERED=1 ORCHESTRATOR_KERNEL_CACHE=/tmp/kc MAX_JOBS=16
L=$OUT/log.txt; say() { echo "== $* ($(date +%T), ${SECONDS}s)" | tee -a $L; }
say "dsa build"
python3 -c "from dsa_verify._build import load as f; f('sm_90a')" >>$L 2>&1
for kv in bf16 fp8; do
  say "ncu w64 $kv"
  timeout 120 ncu --clock-control none -k regex:dsa_verify_wgmma --launch-skip 2 --launch-count 1 \
    --section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis \
    --section MemoryWorkloadAnalysis_Tables --section WarpStateStats --section InstructionStats \
    python3 $R/tests/device/dsa_ncu.py 32:32768:8:64 $kv w64 > $OUT/ncu_w64_$kv.txt 2>&1
  echo "ncu rc=$?" | tee -a $L
  grep -E "Duration|Throughput|Pipe|Shared|Bank|Issue Slots|Eligible|Stall|Executed Ipc|Registers" $OUT/ncu_w64_$kv.txt | head -30 | tee -a $L
done
say done
