#!/usr/bin/env bash
# session 14 call 7: the dense epilogue's workspace index from qo0 (sm_120a fp8 split kernel: 0 spills, was 8 B):
# full dense parity, the dense GPU pytest, A/B against the previous epilogue (.epibase) on 4 shapes
set -o pipefail
export ORCHESTRATOR_KERNEL_CACHE=/tmp/kc MAX_JOBS=16 PYTHONUNBUFFERED=1
R=$PWD; cd kernels; export PYTHONPATH=$PWD:$R
L=$OUT/log.txt; say() { echo "== $* ($(date +%T), ${SECONDS}s)" | tee -a "$L"; }
python3 -c "from mla_verify._build import load; load('sm_90a')" >>"$L" 2>&1 &
python3 -c "from verify_tools.bench import load_tree; load_tree('sm_90a', '$R/.epibase/kernels/mla_verify/csrc')" >>"$L" 2>&1 &
wait; say built
timeout 150 python3 -m verify_tools.parity --json > $OUT/parity.json 2>>"$L"; echo "parity rc=$?" | tee -a "$L"
python3 -c "
import json; d=json.load(open('$OUT/parity.json')); print('parity ok', d.get('ok'), d.get('summary'))
[print('FAIL', c.get('name'), c.get('tile_config')) for c in d.get('cases', []) if not c.get('ok', True)]" 2>&1 | tee -a "$L"
say "gpu pytest"
(cd $R && timeout 150 python3 -m pytest -q -m gpu tests/kernels/test_kernel_gpu_parity.py -p no:cacheprovider 2>&1 | tail -2 | tee -a "$L")
say "ab"
timeout 120 python3 -m verify_tools.bench --tree-ab base=$R/.epibase/kernels/mla_verify/csrc --ab-gb-trees cur \
  --shapes 1:4096:8:16,1:32768:8:16,8:32768:8:16,32:8192:8:16 --ab-out "$OUT/ab.json" >/dev/null 2>>"$L"; echo "ab rc=$?" | tee -a "$L"
python3 -c "
import json; d=json.load(open('$OUT/ab.json'))
for r in d['ab']: print(f\"B={r['B']} L={r['L']}: us {r['us']} over base {r.get('ratio_over_base')} bitwise {r.get('bitwise_equal_base')}\")
print('gb max ratio cur', max(r['ratio'] for r in d['graph_buffer']))" 2>&1 | tee -a "$L"
say done
