#!/usr/bin/env bash
# Session 24 call 3 (diagnostic, issue 13): where do the per-CTA kernel's (MODE 2) ASYM CTAs lose their ~4% against
# the ASYM kernel (MODE 1)? Call 1: 168.0 vs 161.3 us at B=8 L=32k, and desc_add did not move it although both S
# loops are now 2,050-2,051 SASS instructions (cuobjdump; the V loop is 194 vs 216). Nsight Compute's per-instruction
# warp-stall sampling (SourceCounters, exported as SASS CSV) of both builds at B=8 L=32k, plus the raw warp-state and
# instruction metrics; the local analysis sums the samples by stall reason over each loop's address range.
# Trees: m1 = the checkout with MLAV_WS=2, m2 = with MLAV_WS=3. Run from the repository root, no carry, ~3 min.
set -o pipefail
export ORCHESTRATOR_KERNEL_CACHE=/tmp/kc MAX_JOBS=16 PYTHONUNBUFFERED=1
R=$PWD; L=$OUT/log.txt; say() { echo "== $* ($(date +%T), ${SECONDS}s)" | tee -a "$L"; }
C=kernels/mla_verify/csrc
rm -rf /tmp/m1 /tmp/m2 && cp -r $C /tmp/m1 && cp -r $C /tmp/m2
sed -i 's/#define MLAV_WS 1/#define MLAV_WS 2/' /tmp/m1/mla_verify.cu
sed -i 's/#define MLAV_WS 1/#define MLAV_WS 3/' /tmp/m2/mla_verify.cu
export PYTHONPATH=$R/kernels:$R
for t in /tmp/m1 /tmp/m2; do
  python3 -c "import sys; from verify_tools.bench import load_tree; load_tree('sm_90a', sys.argv[1])" "$t" >>"$L" 2>&1 &
done
wait; say built
ncu --version | tail -1 | tee -a "$L"
for t in m1 m2; do
  timeout 150 ncu --clock-control none -k regex:split_wgmma --launch-skip 2 --launch-count 1 --section WarpStateStats \
    --section SourceCounters --section InstructionStats --import-source no -f -o $OUT/ncu_$t \
    python3 tests/device/dense_ncu.py 8:32768:8:16 sm90wg /tmp/$t >>"$L" 2>&1
  echo "ncu $t rc=$?" | tee -a "$L"
  ncu -i $OUT/ncu_$t.ncu-rep --page source --csv --print-source sass > $OUT/src_$t.csv 2>>"$L"; echo "source csv $t rc=$? $(wc -l < $OUT/src_$t.csv) lines" | tee -a "$L"
  ncu -i $OUT/ncu_$t.ncu-rep --page raw --csv > $OUT/raw_$t.csv 2>>"$L"; echo "raw csv $t rc=$?" | tee -a "$L"
done
head -3 $OUT/src_m1.csv | cut -c1-1500 | tee -a "$L"
say done
