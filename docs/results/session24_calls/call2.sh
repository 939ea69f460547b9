#!/usr/bin/env bash
# Prepared in session 23 (issue 14; compiled, never run). Session 23 measured w64's fp8 kernel paying 2.6-4.5 us of
# cold instruction fetch at B <= 2, H >= 64 (cold_code.py --dsa; ncu: 2.51 no_instruction stalls per issue vs 0.24 for
# bf16). nvdisasm's line info puts ~40% of that kernel's SASS in q_nope_sigma_to_f16 (its 8-iteration head loop fully
# unrolled, inlined twice: the prologue and the rare new-sigma path). dsa_q_sigma_loop.patch keeps that loop rolled
# (#pragma unroll 1): w64 fp8 6,464 -> 4,776 SASS instructions, 243 registers, 0 spills; every other kernel's SASS
# unchanged. Trees: cur = the checkout + the patch, base = the checkout. Measures: dsa_tree_ab (w64 bf16/fp8 shapes,
# bitwise vs base), cur's cold-code cost (cold_code.py times the checkout's build only: compare with session 23's rows
# of the shipped kernel), parity on auto and w64, the scale-spike case (the new-sigma path), memcheck on it.
# Run from the repository root, no carry, ~5 min.
set -o pipefail
export ORCHESTRATOR_KERNEL_CACHE=/tmp/kc MAX_JOBS=16 PYTHONUNBUFFERED=1
R=$PWD; L=$OUT/log.txt; say() { echo "== $* ($(date +%T), ${SECONDS}s)" | tee -a "$L"; }
rm -rf /tmp/base && mkdir -p /tmp/base/kernels && cp -r kernels/dsa_verify kernels/mla_verify /tmp/base/kernels/
git apply docs/results/session23_calls/dsa_q_sigma_loop.patch 2>>"$L" || patch -p1 < docs/results/session23_calls/dsa_q_sigma_loop.patch >>"$L" 2>&1
grep -c "pragma unroll 1" kernels/dsa_verify/csrc/dsa_verify_wgmma.cuh | tee -a "$L"
cd kernels || exit 2
export PYTHONPATH=$PWD:$R
python3 -c "from dsa_verify._build import load; load('sm_90a')" >>"$L" 2>&1 &
python3 -c "from dsa_verify._build import load_experimental as f; f('sm_90a')" >>"$L" 2>&1 &
python3 -c "from verify_tools.dsa_tree_ab import load_tree as f; f('sm_90a', '/tmp/base/kernels/dsa_verify/csrc')" >>"$L" 2>&1 &
wait; say built
timeout 240 python3 -m verify_tools.dsa_tree_ab --trees base=/tmp/base/kernels/dsa_verify/csrc --configs auto \
  --shapes 1:32768:4:64,1:4096:4:64,2:32768:4:64,1:32768:4:128,8:32768:8:64,32:32768:8:64 --kv bf16,fp8 --reps 10 \
  --out $OUT/ab.json >/dev/null 2>>"$L"; echo "ab rc=$?" | tee -a "$L"
python3 -c "
import json; d=json.load(open('$OUT/ab.json'))
for r in d['rows']: print(r['B'], r['L'], r['n'], r['H'], r['kv'], r['config'], r['us'], r.get('ratio_over_base'), r.get('bitwise_equal_base'), r.get('errors', ''))
print('failed', d['failed'])" 2>&1 | tee -a "$L"
timeout 90 python3 ../tests/device/cold_code.py 1:32768:4:64,1:4096:4:64,2:32768:4:64 --dsa --out "$OUT/dsa_cold_code.json" 2>>"$L" | tee -a "$L"
timeout 150 python3 -m verify_tools.dsa_parity --json --configs auto,w64 > "$OUT/parity.json" 2>>"$L"; echo "parity rc=$?" | tee -a "$L"
python3 -c "import json; d=json.load(open('$OUT/parity.json')); print(d.get('summary'))" 2>&1 | tee -a "$L"
timeout 90 python3 -m verify_tools.dsa_parity --json --configs w64 --cases fp8_scale_spikes_b2_n4_h64 > "$OUT/parity_spike.json" 2>>"$L"
python3 -c "import json; d=json.load(open('$OUT/parity_spike.json')); print('spike', d.get('summary'))" 2>&1 | tee -a "$L"
timeout 90 compute-sanitizer --tool memcheck --print-limit 4 --log-file /tmp/san.log python3 -m verify_tools.dsa_parity --json --configs w64 --cases fp8_scale_spikes_b2_n4_h64 > /dev/null 2>&1
echo "memcheck rc=$? | $(grep 'ERROR SUMMARY' /tmp/san.log | head -1)" | tee -a "$L"
say done
