#!/usr/bin/env bash
# Prepared in session 20 for the next session's first device call: the checks call 4's shipped change (bf16 loads
# interleaved with S) did not get for lack of device time. Racecheck on two bf16 parity cases of the wgmma config,
# then the dense + DSA GPU pytest. Run from the repository root, no carry, ~4 min.
set -o pipefail
export ORCHESTRATOR_KERNEL_CACHE=/tmp/kc MAX_JOBS=16 PYTHONUNBUFFERED=1
R=$PWD; L=$OUT/log.txt; say() { echo "== $* ($(date +%T), ${SECONDS}s)" | tee -a "$L"; }
export PYTHONPATH=$R/kernels:$R
python3 -c "from mla_verify._build import load; load('sm_90a')" >>"$L" 2>&1; say built
cd kernels || exit 2
for c in b4_varlen_tree_h16 b2_causal_nomask_h64; do
  timeout 150 compute-sanitizer --tool racecheck --print-limit 4 --log-file /tmp/san.log python3 -m verify_tools.parity --json --configs sm90wg --cases $c > /tmp/san.json 2>/dev/null
  echo "racecheck $c rc=$? | $(grep -v '^=========     ' /tmp/san.log | head -3 | tr '\n' ' ' | cut -c1-300) | $(python3 -c "import json; d=json.load(open('/tmp/san.json')); print([(x['name'], x['ok']) for x in d['cases']])" 2>&1)" | tee -a "$L"
done
cd "$R" || exit 2
timeout 200 python3 -m pytest -q -p no:cacheprovider tests/kernels/test_kernel_gpu_parity.py tests/kernels/test_dsa_gpu.py 2>&1 | tail -3 | tee -a "$L"
say done
