#!/usr/bin/env bash
# session 14 call 4: w64r / w64r12 (Q's A fragment of S's first 8 / 12 k-steps in registers, bf16) against w64
set -o pipefail
R=$PWD; cd kernels
export PYTHONPATH=$PWD:$R PYTHONUNBUFFERED=1 ORCHESTRATOR_KERNEL_CACHE=/tmp/kc MAX_JOBS=16
L=$OUT/log.txt; say() { echo "== $* ($(date +%T), ${SECONDS}s)" | tee -a $L; }
python3 -c "from dsa_verify._build import load_experimental as f; f('sm_90a')" >>$L 2>&1 &
python3 -c "from dsa_verify._build import load_trace as f; f('sm_90a')" >>$L 2>&1 &
python3 -c "from dsa_verify._build import load as f; f('sm_90a')" >>$L 2>&1 &
wait; say "built"
timeout 120 python3 -m verify_tools.dsa_parity --json --out $OUT/parity.json --no-peer \
  --cases b2_n4_h128_bf16,hostile_b2_n4_h64_bf16,short_prefix_b3_n8_h16_bf16,glm5_b1_n4_h8_L32k_bf16,b2_n4_h128_fp8 \
  --configs w64,w64r,w64r12 >/dev/null 2>>$L; echo "parity rc=$?" | tee -a $L
python3 -c "
import json;d=json.load(open('$OUT/parity.json'));print(d.get('summary'))
for r in d['cases']:
  print('OK ' if r['ok'] else 'FAIL', r.get('case'), r.get('config'), {k:v for k,v in r.items() if k in ('rel_fro','mismatches','token_exact','deterministic')})" 2>&1 | tee -a $L
say "phases"
timeout 100 python3 -m verify_tools.dsa_bench --trace-phases --shapes 32:32768:8:64 --reps 5 \
  --trace-configs w64,w64r,w64r12 --trace-kv bf16 > $OUT/phases.json 2>>$L; echo "phases rc=$?" | tee -a $L
python3 -c "
import json;d=json.load(open('$OUT/phases.json'))
for k,v in d.items(): print(k, {kk:(round(vv,2) if isinstance(vv,float) else vv) for kk,vv in v.items() if kk in ('plan','loop_us_per_tile_med','wait_barrier_cycles_per_tile_med','s_cycles_per_tile_med','softmax_pv_issue_cycles_per_tile_med','store_pv_wait_cycles_per_tile_med','split_end_us','error')})" 2>&1 | tee -a $L
for alt in w64r w64r12; do
  say "ab $alt"
  timeout 150 python3 -m verify_tools.dsa_bench --shapes 32:32768:8:64,8:32768:8:128,8:32768:8:64,1:32768:4:64,32:32768:8:16 \
    --reps 20 --alt-config $alt --no-sglang --no-flashmla --out $OUT/ab_$alt.json >/dev/null 2>>$L; echo "ab rc=$?" | tee -a $L
  python3 -c "import json; from verify_tools.dsa_bench import _print_rows; _print_rows(json.load(open('$OUT/ab_$alt.json')))" 2>&1 | grep bf16 | tee -a $L
done
say "sanitizers w64r12"
for spec in memcheck:hostile_b2_n4_h64_bf16 racecheck:short_prefix_b3_n8_h16_bf16 synccheck:short_prefix_b3_n8_h16_bf16; do
  tool=${spec%%:*}; c=${spec#*:}
  timeout 100 compute-sanitizer --tool $tool --print-limit 4 --log-file /tmp/san.log python3 -m verify_tools.dsa_parity --cases $c --configs w64r12 --no-graph --no-peer --json > /tmp/san.json 2>/dev/null
  echo "$spec rc=$? $(grep -o '"passed": [0-9]*' /tmp/san.json | head -1) | $(grep -v '^=========     ' /tmp/san.log | head -3 | tr '\n' ' ' | cut -c1-300)" | tee -a $L
done
say done
