#!/usr/bin/env bash
# Device diagnostic of the DSA n8-family split kernels (run from the repository root on the GPU
# machine; not a test): the conversion/mma rate microbenchmark (tests/device/cvt_rate.cu), the SASS
# opcode histogram of every n8 split kernel of the experimental JIT build, then Nsight Compute
# (--clock-control none) on one shape for each "kv:config" given. Results under $OUT.
# Usage: bash tests/device/dsa_ncu.sh B:L:n:H kv:config [kv:config ...]
set -o pipefail
OUT=${OUT:-/tmp/dsa_ncu}
mkdir -p "$OUT"
SHAPE=$1
shift
nvcc -arch=sm_90a -O3 -o /tmp/cvt_rate tests/device/cvt_rate.cu && /tmp/cvt_rate | tee "$OUT/cvt_rate.txt"
export PYTHONPATH=$PWD/kernels:$PWD ORCHESTRATOR_KERNEL_CACHE=/tmp/dsa_kc PYTHONUNBUFFERED=1
python3 -c "from dsa_verify._build import load_experimental; load_experimental('sm_90a')" 2>&1 | tail -2
so=$(find /tmp/dsa_kc -name "*_exp*.so" | head -1)
echo "library: $so"
cuobjdump -sass "$so" | python3 -c '
import re, sys, collections
fn, hist = None, {}
for line in sys.stdin:
    m = re.search(r"Function : (\S+)", line)
    if m:
        fn = m.group(1); hist[fn] = collections.Counter(); continue
    m = re.search(r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]+)", line)
    if fn and m:
        hist[fn][m.group(1).split(".")[0]] += 1
for fn, c in hist.items():
    if "n8" in fn:
        print(fn[:90], sum(c.values()), dict(c.most_common(24)))
' > "$OUT/sass_hist.txt"
cat "$OUT/sass_hist.txt" | cut -c1-900
for spec in "$@"; do
  kv=${spec%%:*}; cfg=${spec##*:}
  timeout 150 ncu --clock-control none -k regex:dsa_verify_n8 --launch-skip 2 --launch-count 1 \
    --section SpeedOfLight --section ComputeWorkloadAnalysis --section WarpStateStats \
    --section InstructionStats --section SchedulerStats --section MemoryWorkloadAnalysis --section Occupancy \
    python3 tests/device/dsa_ncu.py "$SHAPE" "$kv" "$cfg" > "$OUT/ncu_${kv}_${cfg}.txt" 2>&1
  echo "ncu $spec rc=$?"
  grep -E "Duration|Throughput|Pipe|Issue Slots|Eligible|Active Warps|Stall|No Eligible|Executed Ipc|Bank|Registers|Achieved Occ|L1/TEX Hit|L2 Hit" "$OUT/ncu_${kv}_${cfg}.txt" | head -40
done
