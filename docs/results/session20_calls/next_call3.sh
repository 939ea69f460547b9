#!/usr/bin/env bash
# Prepared in session 20 (never run): after next_call2.sh, the sanitizers and the GPU pytest on the warp-specialized
# bf16 kernel (the checkout's csrc switched to MLAV_WS=1 on the device, as in next_call2.sh). Run from the repository
# root, no carry, ~5 min.
set -o pipefail
export ORCHESTRATOR_KERNEL_CACHE=/tmp/kc MAX_JOBS=16 PYTHONUNBUFFERED=1
R=$PWD; L=$OUT/log.txt; say() { echo "== $* ($(date +%T), ${SECONDS}s)" | tee -a "$L"; }
sed -i 's/#define MLAV_WS 0/#define MLAV_WS 1/' kernels/mla_verify/csrc/mla_verify.cu
grep -c "define MLAV_WS 1" kernels/mla_verify/csrc/mla_verify.cu | tee -a "$L"
export PYTHONPATH=$R/kernels:$R
python3 -c "from mla_verify._build import load; load('sm_90a')" >>"$L" 2>&1; say built
cd kernels || exit 2
for tool in memcheck racecheck synccheck; do
  timeout 120 compute-sanitizer --tool $tool --print-limit 4 --log-file /tmp/san.log python3 -m verify_tools.parity --json --configs sm90wg --cases b4_varlen_tree_h16 > /tmp/san.json 2>/dev/null
  echo "$tool rc=$? | $(grep -v '^=========     ' /tmp/san.log | head -3 | tr '\n' ' ' | cut -c1-300) | $(python3 -c "import json; d=json.load(open('/tmp/san.json')); print([(c['name'], c['ok']) for c in d['cases']])" 2>&1)" | tee -a "$L"
done
cd "$R" || exit 2
timeout 200 python3 -m pytest -q -p no:cacheprovider tests/kernels/test_kernel_gpu_parity.py tests/kernels/test_dsa_gpu.py 2>&1 | tail -3 | tee -a "$L"
say done
