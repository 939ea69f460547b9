#!/usr/bin/env bash
# session 13 call 3: w64q after the flags change: sanitizers, parity, phases, A/B
set -o pipefail
R=$PWD; cd kernels
export PYTHONPATH=$PWD:$R PYTHONUNBUFFERED=1 ORCHESTRATOR_KERNEL_CACHE=/tmp/kc MAX_JOBS=16
L=$OUT/log.txt; say() { echo "== $* ($(date +%T), ${SECONDS}s)" | tee -a $L; }
say "builds"
python3 -c "from dsa_verify._build import load_experimental as f; f('sm_90a')" >>$L 2>&1 &
python3 -c "from dsa_verify._build import load_trace as f; f('sm_90a')" >>$L 2>&1 &
python3 -c "from dsa_verify._build import load as f; f('sm_90a')" >>$L 2>&1 &
wait; say "built"
for spec in synccheck:short_prefix_b3_n8_h16_bf16 synccheck:hostile_b2_n4_h64_bf16 racecheck:short_prefix_b3_n8_h16_bf16 memcheck:hostile_b2_n4_h64_bf16 memcheck:b2_n4_h128_bf16; do
  tool=${spec%%:*}; c=${spec#*:}
  timeout 100 compute-sanitizer --tool $tool --print-limit 4 --log-file /tmp/san.log python3 -m verify_tools.dsa_parity --cases $c --configs w64q --no-graph --no-peer --json > /tmp/san.json 2>/dev/null
  echo "$spec rc=$? $(grep -o '"passed": [0-9]*' /tmp/san.json | head -1) | $(grep -v '^=========     ' /tmp/san.log | head -4 | tr '\n' ' ' | cut -c1-300)" | tee -a $L
done
timeout 150 python3 -m verify_tools.dsa_parity --json --out $OUT/parity.json --no-peer \
  --cases glm5_b1_n4_h8_L32k_bf16,hostile_b2_n4_h64_bf16,b2_n4_h128_bf16,short_prefix_b3_n8_h16_bf16,b8_n8_h16_bf16,b64_n4_h8_bf16,hostile_b1_n4_h8_bf16 \
  --configs w64,w64q >/dev/null 2>>$L; echo "parity rc=$?" | tee -a $L
python3 -c "import json;d=json.load(open('$OUT/parity.json'));print(d.get('summary'));[print('FAIL',r) for r in d['cases'] if not r['ok']]" 2>&1 | tee -a $L
say "phases"
timeout 100 python3 -m verify_tools.dsa_bench --trace-phases --shapes 32:32768:8:64 --reps 5 \
  --trace-configs w64,w64q --trace-kv bf16 > $OUT/phases.json 2>>$L; echo "phases rc=$?" | tee -a $L
python3 -c "
import json;d=json.load(open('$OUT/phases.json'))
for k,v in d.items(): print(k, {kk:(round(vv,2) if isinstance(vv,float) else vv) for kk,vv in v.items() if kk not in ('ctas','tiles_med')})" 2>&1 | tee -a $L
say "ab w64q"
timeout 150 python3 -m verify_tools.dsa_bench --shapes 32:32768:8:64,8:32768:8:64,8:32768:8:128,8:32768:8:32,4:32768:4:64,1:32768:4:64 \
  --reps 20 --alt-config w64q --no-sglang --no-flashmla --out $OUT/ab_w64q.json >/dev/null 2>>$L; echo "ab rc=$?" | tee -a $L
python3 -c "import json, sys; from verify_tools.dsa_bench import _print_rows; d = json.load(open('$OUT/ab_w64q.json')); _print_rows(d)" 2>&1 | grep bf16 | tee -a $L
say done
