#!/usr/bin/env bash
# Session 15 call 4: w64p (w64's fp8 kernel with tile 1's rows loaded by the prologue; an experimental variant
# measured here and removed, never committed: docs/kernels/dsa-verify-notes.md, "Session 15") against w64.
# Run from the repository root on the device with $OUT set.
set -o pipefail
R=$PWD; cd kernels
export PYTHONPATH=$PWD:$R PYTHONUNBUFFERED=1 ORCHESTRATOR_KERNEL_CACHE=/tmp/kc MAX_JOBS=16
L=$OUT/log.txt; say() { echo "== $* ($(date +%T), ${SECONDS}s)" | tee -a $L; }
python3 -c "from dsa_verify._build import load_experimental as f; f('sm_90a')" >>$L 2>&1 &
python3 -c "from dsa_verify._build import load_trace as f; f('sm_90a')" >>$L 2>&1 &
python3 -c "from dsa_verify._build import load as f; f('sm_90a')" >>$L 2>&1 &
wait; say "built"
timeout 150 python3 -m verify_tools.dsa_parity --json --out $OUT/parity.json --no-peer \
  --cases fp8_scale_spikes_b2_n4_h64,fp8_extreme_scales_b2_n4_h8,hostile_b2_n4_h16_fp8,short_prefix_b3_n8_h16_fp8,b2_n4_h128_fp8,b8_n4_h64_fp8,glm5_b1_n4_h8_L32k_fp8,b2_n4_h128_bf16 \
  --configs w64,w64p >/dev/null 2>>$L; echo "parity rc=$?" | tee -a $L
python3 -c "
import json;d=json.load(open('$OUT/parity.json'));print(d.get('summary'))
for r in d['cases']:
  print('OK ' if r['ok'] else 'FAIL', r.get('case'), r.get('config'), {k:v for k,v in r.items() if k in ('rel_fro','mismatches','token_exact')})" 2>&1 | tee -a $L
say "phases"
timeout 100 python3 -m verify_tools.dsa_bench --trace-phases --shapes 1:32768:4:64,4:32768:4:64 --reps 5 \
  --trace-configs w64,w64p --trace-kv fp8 > $OUT/phases.json 2>>$L; echo "phases rc=$?" | tee -a $L
python3 -c "
import json;d=json.load(open('$OUT/phases.json'))
for k,v in d.items(): print(k, {kk:(round(vv,2) if isinstance(vv,float) else vv) for kk,vv in v.items() if kk in ('plan','loop_us_per_tile_med','setup_us_med','split_end_us','error')})" 2>&1 | tee -a $L
say "ab w64p"
timeout 200 python3 -m verify_tools.dsa_bench --shapes 1:32768:4:64,2:32768:4:64,4:32768:4:64,1:32768:8:64,1:32768:4:128,8:32768:8:64,32:32768:8:64,2:32768:4:16,8:32768:8:16 \
  --reps 20 --alt-config w64p --no-sglang --no-flashmla --out $OUT/ab_w64p.json >/dev/null 2>>$L; echo "ab rc=$?" | tee -a $L
python3 -c "import json; from verify_tools.dsa_bench import _print_rows; _print_rows(json.load(open('$OUT/ab_w64p.json')))" 2>&1 | grep fp8 | sed 's/vs_triton.*uniq/uniq/' | tee -a $L
say "sanitizers w64p"
for spec in memcheck:fp8_scale_spikes_b2_n4_h64 memcheck:hostile_b2_n4_h16_fp8 racecheck:fp8_scale_spikes_b2_n4_h64 racecheck:short_prefix_b3_n8_h16_fp8; do
  tool=${spec%%:*}; c=${spec#*:}
  timeout 120 compute-sanitizer --tool $tool --print-limit 4 --log-file /tmp/san.log python3 -m verify_tools.dsa_parity --cases $c --configs w64p --no-graph --no-peer --json > /tmp/san.json 2>/dev/null
  echo "$spec rc=$? $(grep -o '"passed": [0-9]*' /tmp/san.json | head -1) | $(grep -v '^=========     ' /tmp/san.log | head -3 | tr '\n' ' ' | cut -c1-300)" | tee -a $L
done
say done
