#!/usr/bin/env bash
# Session 15 call 6, dense: Nsight Compute of the fp8 split kernel (sm90wg) at the memory-floored shape
# (4, 131072, 4, 16) and of the bf16 one beside it: stall reasons, pipes, and per-SASS source counters of
# the fp8 kernel. Run from the repository root with $OUT set.
set -o pipefail
export ORCHESTRATOR_KERNEL_CACHE=/tmp/kc MAX_JOBS=16 PYTHONUNBUFFERED=1
R=$PWD; cd kernels || exit 2
export PYTHONPATH=$PWD:$R
L=$OUT/log.txt; say() { echo "== $* ($(date +%T), ${SECONDS}s)" | tee -a "$L"; }
python3 -c "from mla_verify._build import load; load('sm_90a')" >>"$L" 2>&1; say built
for kv in fp8 bf16; do
  f=""; [ $kv = fp8 ] && f=--fp8
  timeout 150 ncu --clock-control none -k regex:split_wgmma --launch-skip 2 --launch-count 1 \
    --section SpeedOfLight --section WarpStateStats --section InstructionStats --section MemoryWorkloadAnalysis \
    python3 $R/tests/device/dense_ncu.py 4:131072:4:16 sm90wg $f > $OUT/ncu_dense_$kv.txt 2>&1
  echo "ncu $kv rc=$?" | tee -a "$L"
  grep -E "Duration|Throughput|Issue Slots|Eligible|Stall|Executed Ipc|Registers|Warp Cycles" $OUT/ncu_dense_$kv.txt | head -24 | tee -a "$L"
done
timeout 150 ncu --clock-control none -k regex:split_wgmma --launch-skip 2 --launch-count 1 --section SourceCounters \
  --page source --print-source sass --csv python3 $R/tests/device/dense_ncu.py 4:131072:4:16 sm90wg --fp8 > /tmp/src.csv 2>&1
echo "ncu src rc=$? $(wc -l < /tmp/src.csv) lines" | tee -a "$L"
gzip -c /tmp/src.csv > $OUT/ncu_src_dense_fp8.csv.gz
say done
