#!/usr/bin/env bash
# Session 15 call 3: the shipped tree with the lazy sigma as w64's fp8 kernel (w64z promoted, the prepass gone):
# parity (full suite auto,w64; the scale-spike case on every config); GPU pytest; phases; H >= 16 bench with
# FlashMLA; sanitizers on w64 fp8; Nsight Compute source counters of w64 bf16 (the shared-store bank conflicts).
# Run from the repository root on the device with $OUT set; carry .whl-flashmla.
set -o pipefail
R=$PWD; cd kernels
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site $R/.whl-flashmla/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD:$R PYTHONUNBUFFERED=1 ORCHESTRATOR_KERNEL_CACHE=/tmp/kc MAX_JOBS=16
L=$OUT/log.txt; say() { echo "== $* ($(date +%T), ${SECONDS}s)" | tee -a $L; }
python3 -c "from dsa_verify._build import load_trace as f; f('sm_90a')" >>$L 2>&1 &
python3 -c "from dsa_verify._build import load as f; f('sm_90a')" >>$L 2>&1 &
wait; say "built"
summ() { python3 -c "
import json;d=json.load(open('$1'));print(d.get('summary'))
fp8=[r for r in d['cases'] if r.get('kv')=='fp8' and r.get('rel_fro') is not None]
print('fp8 rel_fro max', max([r['rel_fro'] for r in fp8] or [0]), 'mismatches', sum(r.get('mismatches') or 0 for r in d['cases']))
[print('FAIL', r) for r in d['cases'] if not r['ok']]" 2>&1 | tee -a $L; }
timeout 200 python3 -m verify_tools.dsa_parity --json --out $OUT/parity.json --no-peer --configs auto,w64 >/dev/null 2>>$L; echo "parity rc=$?" | tee -a $L
summ $OUT/parity.json
timeout 120 python3 -m verify_tools.dsa_parity --json --out /tmp/spike.json --no-peer --no-graph --cases fp8_scale_spikes_b2_n4_h64 --configs all >/dev/null 2>>$L; echo "spike x all rc=$?" | tee -a $L
summ /tmp/spike.json
python3 -c "
import json;d=json.load(open('/tmp/spike.json'))
for r in d['cases']: print(r['ok'], r.get('config'), r.get('rel_fro'), r.get('mismatches'), r.get('skipped') or '')" 2>&1 | tee -a $L
say "gpu pytest"
(cd $R && timeout 150 python3 -m pytest -q -m gpu tests/kernels/test_dsa_gpu.py -p no:cacheprovider 2>&1 | tail -2 | tee -a $L)
say "phases"
timeout 100 python3 -m verify_tools.dsa_bench --trace-phases --shapes 32:32768:8:64,8:32768:8:64 --reps 5 --trace-configs w64 --trace-kv fp8 > $OUT/phases.json 2>>$L; echo "phases rc=$?" | tee -a $L
python3 -c "
import json;d=json.load(open('$OUT/phases.json'))
for k,v in d.items(): print(k, {kk:(round(vv,2) if isinstance(vv,float) else vv) for kk,vv in v.items() if kk in ('plan','loop_us_per_tile_med','setup_us_med','split_end_us','s_cycles_per_tile_med')})" 2>&1 | tee -a $L
say "bench H>=16 + FlashMLA"
timeout 150 python3 -m verify_tools.dsa_bench --shapes 32:32768:8:64,8:32768:8:128,8:32768:8:64,4:32768:4:64,1:32768:4:64,8:32768:8:16 \
  --reps 20 --no-sglang --out $OUT/bench.json >/dev/null 2>>$L; echo "bench rc=$?" | tee -a $L
python3 -c "import json; from verify_tools.dsa_bench import _print_rows; _print_rows(json.load(open('$OUT/bench.json')))" 2>&1 | tee -a $L
say "sanitizers w64 fp8"
for spec in memcheck:fp8_scale_spikes_b2_n4_h64 memcheck:hostile_b2_n4_h16_fp8 racecheck:fp8_scale_spikes_b2_n4_h64 synccheck:fp8_scale_spikes_b2_n4_h64; do
  tool=${spec%%:*}; c=${spec#*:}
  timeout 120 compute-sanitizer --tool $tool --print-limit 4 --log-file /tmp/san.log python3 -m verify_tools.dsa_parity --cases $c --configs w64 --no-graph --no-peer --json > /tmp/san.json 2>/dev/null
  echo "$spec rc=$? $(grep -o '"passed": [0-9]*' /tmp/san.json | head -1) | $(grep -v '^=========     ' /tmp/san.log | head -3 | tr '\n' ' ' | cut -c1-300)" | tee -a $L
done
say "ncu w64 bf16 source counters"
timeout 120 ncu --clock-control none -k regex:dsa_verify_wgmma --launch-skip 2 --launch-count 1 --section SourceCounters \
  --metrics smsp__sass_l1tex_data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum,smsp__sass_l1tex_data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum \
  --page source --print-source sass --csv python3 $R/tests/device/dsa_ncu.py 32:32768:8:64 bf16 w64 > /tmp/ncu_src.csv 2>&1
echo "ncu rc=$? $(wc -l < /tmp/ncu_src.csv) lines" | tee -a $L
gzip -c /tmp/ncu_src.csv > $OUT/ncu_src_w64_bf16.csv.gz
say done
