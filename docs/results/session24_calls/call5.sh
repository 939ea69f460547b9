#!/usr/bin/env bash
# Session 24 call 5 (issue 14): the shipped tree after call 2's change (w64 fp8's q_nope_sigma_to_f16 loop rolled,
# 7ed790a): the full DSA parity suite over every config, memcheck of w64 on the hostile cases (bf16 H=64, fp8 H=16 and
# H=8 forced onto w64) and the scale-spike case, and the GPU pytest files of both kernels. Run from the repository
# root, no carry, ~4 min.
set -o pipefail
export ORCHESTRATOR_KERNEL_CACHE=/tmp/kc MAX_JOBS=16 PYTHONUNBUFFERED=1
R=$PWD; L=$OUT/log.txt; say() { echo "== $* ($(date +%T), ${SECONDS}s)" | tee -a "$L"; }
export PYTHONPATH=$R/kernels:$R
python3 -c "from dsa_verify._build import load; load('sm_90a')" >>"$L" 2>&1 &
python3 -c "from mla_verify._build import load; load('sm_90a')" >>"$L" 2>&1 &
wait; say built
cd kernels || exit 2
timeout 240 python3 -m verify_tools.dsa_parity --json --configs all > "$OUT/dsa_parity_all.json" 2>>"$L"; echo "dsa parity all rc=$?" | tee -a "$L"
python3 -c "import json; d=json.load(open('$OUT/dsa_parity_all.json')); print(d.get('summary'))" 2>&1 | tee -a "$L"
timeout 120 compute-sanitizer --tool memcheck --print-limit 4 --log-file /tmp/san.log python3 -m verify_tools.dsa_parity --json --configs w64 \
  --cases hostile_b2_n4_h64_bf16,hostile_b2_n4_h16_fp8,hostile_b1_n4_h8_fp8,fp8_scale_spikes_b2_n4_h64 > /tmp/san.json 2>/dev/null
echo "memcheck w64 hostile rc=$? | $(grep 'ERROR SUMMARY' /tmp/san.log | head -1) | $(python3 -c "import json; d=json.load(open('/tmp/san.json')); print(d.get('summary'))" 2>&1 | tail -1)" | tee -a "$L"
cd "$R" && timeout 200 python3 -m pytest -q -p no:cacheprovider tests/kernels/test_dsa_gpu.py tests/kernels/test_kernel_gpu_parity.py 2>&1 | tail -3 | tee -a "$L"
say done
