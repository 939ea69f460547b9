#!/usr/bin/env bash
# session 14 call 2: w64o (fp8 S as one f16 chain, sigma in Q) against w64
set -o pipefail
R=$PWD; cd kernels
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site $R/.whl-flashmla/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD:$R PYTHONUNBUFFERED=1 ORCHESTRATOR_KERNEL_CACHE=/tmp/kc MAX_JOBS=16
L=$OUT/log.txt; say() { echo "== $* ($(date +%T), ${SECONDS}s)" | tee -a $L; }
python3 -c "from dsa_verify._build import load_experimental as f; f('sm_90a')" >>$L 2>&1 &
python3 -c "from dsa_verify._build import load_trace as f; f('sm_90a')" >>$L 2>&1 &
python3 -c "from dsa_verify._build import load as f; f('sm_90a')" >>$L 2>&1 &
wait; say "built"
timeout 150 python3 -m verify_tools.dsa_parity --json --out $OUT/parity.json --no-peer \
  --cases b2_n4_h128_fp8,b8_n4_h64_fp8,hostile_b2_n4_h16_fp8,short_prefix_b3_n8_h16_fp8,fp8_extreme_scales_b2_n4_h8,glm5_b1_n4_h8_L32k_fp8,b2_n4_h128_bf16 \
  --configs w64,w64o >/dev/null 2>>$L; echo "parity rc=$?" | tee -a $L
python3 -c "
import json;d=json.load(open('$OUT/parity.json'));print(d.get('summary'))
for r in d['cases']:
  print('OK ' if r['ok'] else 'FAIL', r.get('case'), r.get('config'), {k:v for k,v in r.items() if k in ('rel_fro','mismatches','token_exact','deterministic')})" 2>&1 | tee -a $L
say "phases"
timeout 100 python3 -m verify_tools.dsa_bench --trace-phases --shapes 32:32768:8:64 --reps 5 \
  --trace-configs w64,w64o --trace-kv fp8 > $OUT/phases.json 2>>$L; echo "phases rc=$?" | tee -a $L
python3 -c "
import json;d=json.load(open('$OUT/phases.json'))
for k,v in d.items(): print(k, {kk:(round(vv,2) if isinstance(vv,float) else vv) for kk,vv in v.items() if kk in ('plan','loop_us_per_tile_med','wait_barrier_cycles_per_tile_med','s_cycles_per_tile_med','softmax_pv_issue_cycles_per_tile_med','store_pv_wait_cycles_per_tile_med','prologue_us_med','setup_us_med','epilogue_us_med','split_end_us','error')})" 2>&1 | tee -a $L
say "ab w64o"
timeout 200 python3 -m verify_tools.dsa_bench --shapes 32:32768:8:64,8:32768:8:128,8:32768:8:64,4:32768:4:64,1:32768:4:64,8:32768:8:16 \
  --reps 20 --alt-config w64o --no-sglang --out $OUT/ab_w64o.json >/dev/null 2>>$L; echo "ab rc=$?" | tee -a $L
python3 -c "import json, sys; from verify_tools.dsa_bench import _print_rows; d = json.load(open('$OUT/ab_w64o.json')); _print_rows(d)" 2>&1 | tee -a $L
say "sanitizers w64o"
for spec in memcheck:hostile_b2_n4_h16_fp8 memcheck:b2_n4_h128_fp8 racecheck:short_prefix_b3_n8_h16_fp8 synccheck:short_prefix_b3_n8_h16_fp8; do
  tool=${spec%%:*}; c=${spec#*:}
  timeout 100 compute-sanitizer --tool $tool --print-limit 4 --log-file /tmp/san.log python3 -m verify_tools.dsa_parity --cases $c --configs w64o --no-graph --no-peer --json > /tmp/san.json 2>/dev/null
  echo "$spec rc=$? $(grep -o '"passed": [0-9]*' /tmp/san.json | head -1) | $(grep -v '^=========     ' /tmp/san.log | head -3 | tr '\n' ' ' | cut -c1-300)" | tee -a $L
done
say done
