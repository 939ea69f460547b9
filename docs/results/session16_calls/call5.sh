#!/usr/bin/env bash
# Session 16 call 5 (carry .whl .whl-flashmla .calls/base16 = git archive 26a0269 kernels/mla_verify/csrc): the trees
# after the two switches became code (dense: the wgmma fp8 loader zeroes at the store; DSA: m32 fp8 checks slots at
# issue) plus, uncommitted, the bf16 draft tile reading its custom-mask bytes first (tree "cur" vs 26a0269 "base":
# bench --tree-ab, bf16, sm90wg + sm120, mask_mode 0 as every bench row). Dense: full parity on every config,
# GPU pytest (dense + DSA), the bench on the headline shapes with fp8 and peers (SGLang 0.5.23, FlashMLA), Nsight
# Compute source counters of the fp8 wgmma kernel at the memory-floored shape (the next top stall).
set -o pipefail
export ORCHESTRATOR_KERNEL_CACHE=/tmp/kc MAX_JOBS=16 PYTHONUNBUFFERED=1
R=$PWD; L=$OUT/log.txt; say() { echo "== $* ($(date +%T), ${SECONDS}s)" | tee -a "$L"; }
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl .whl-flashmla/*.whl >>"$L" 2>&1
python3 -m zipfile -e .whl/sglang-0.5.23-pyonly.zip /tmp/site >>"$L" 2>&1
cd kernels || exit 2
export PYTHONPATH=/tmp/site:$PWD:$R
python3 -c "from mla_verify._build import load; load('sm_90a')" >>"$L" 2>&1 &
python3 -c "from dsa_verify._build import load as f; f('sm_90a')" >>"$L" 2>&1 &
python3 -c "from verify_tools.bench import load_tree; load_tree('sm_90a', '$R/.calls/base16/kernels/mla_verify/csrc')" >>"$L" 2>&1 &
wait; say built
timeout 150 python3 -m verify_tools.bench --tree-ab base=$R/.calls/base16/kernels/mla_verify/csrc --ab-gb-trees none --ab-reps 3 \
  --ab-configs sm90wg,sm120 --shapes 1:4096:8:16,1:32768:8:16,1:4096:4:128,8:32768:8:16 --ab-out "$OUT/ab_mask.json" >/dev/null 2>>"$L"
echo "ab rc=$?" | tee -a "$L"
python3 - "$OUT/ab_mask.json" <<'PY' 2>&1 | tee -a "$L"
import json, sys
d = json.load(open(sys.argv[1]))
for r in d["ab"]:
    print(f"B={r['B']} L={r['L']} n={r['n']} H={r['H']}: us {r['us']} over base {r.get('ratio_over_base')} bitwise {r.get('bitwise_equal_base')}")
PY
timeout 150 python3 -m verify_tools.parity --json --configs all > $OUT/parity_dense.json 2>>"$L"; echo "dense parity rc=$?" | tee -a "$L"
python3 -c "
import json; d=json.load(open('$OUT/parity_dense.json')); print(d.get('summary'))" 2>&1 | tee -a "$L"
say pytest
(cd $R && timeout 200 python3 -m pytest -q -p no:cacheprovider tests/kernels/test_kernel_gpu_parity.py tests/kernels/test_dsa_gpu.py 2>&1 | tail -3) | tee -a "$L"
say bench
timeout 200 python3 -m verify_tools.bench --json --fp8 --no-graph-buffer \
  --shapes 4:131072:4:16,8:32768:8:16,32:8192:8:16,1:32768:8:16,1:4096:8:16 > $OUT/bench_dense.json 2>>"$L"; echo "bench rc=$?" | tee -a "$L"
python3 -c "
import json; d=json.load(open('$OUT/bench_dense.json'))
for r in d['rows']: print({k: r.get(k) for k in ('B','L','n','H','new_us','sol_pct','fp8_us','fp8_over_bf16','fp8_sol_pct','speedup_vs_sglang_extend','speedup_vs_flashmla')})
print(d['summary'])" 2>&1 | tee -a "$L"
say ncu
timeout 150 ncu --clock-control none -k regex:split_wgmma --launch-skip 2 --launch-count 1 --section SourceCounters --section WarpStateStats --section SpeedOfLight \
  --page source --print-source sass --csv python3 $R/tests/device/dense_ncu.py 4:131072:4:16 sm90wg --fp8 > /tmp/src.csv 2>&1
echo "ncu src rc=$? $(wc -l < /tmp/src.csv) lines" | tee -a "$L"
gzip -c /tmp/src.csv > $OUT/ncu_src_dense_fp8.csv.gz
timeout 100 ncu --clock-control none -k regex:split_wgmma --launch-skip 2 --launch-count 1 --section SpeedOfLight --section WarpStateStats --section InstructionStats \
  python3 $R/tests/device/dense_ncu.py 4:131072:4:16 sm90wg --fp8 > $OUT/ncu_dense_fp8.txt 2>&1
grep -E "Duration|DRAM Throughput|Memory Throughput|Stall|Executed Ipc|Registers|Warp Cycles" $OUT/ncu_dense_fp8.txt | head -16 | tee -a "$L"
say done
