#!/usr/bin/env bash
# Session 33, call 3 (carry .s32tree = git archive 7ee0d34 kernels; ~3 min). Call 2 found session 32's shipped tree
# (the weighted split rule's plumbing at weight 0) 1.031x the kernel before it (7e53b30) at B=1 L=4k, every B=1
# graph-buffer row 2.5-3.9% slower, outputs bitwise equal; this checkout reverts the kernel to 7e53b30's.
# 1. The same A/B again in a new process, from the old checkout (.s32tree, "cur" = weighted at weight 0) against this
#    checkout's csrc ("base") and a second copy of it ("same": the noise floor of identical binaries).
# 2. This checkout (the reverted Python API with 7e53b30's kernel): full parity and the GPU pytest file.
set -o pipefail
export ORCHESTRATOR_KERNEL_CACHE=/tmp/kc MAX_JOBS=16 PYTHONUNBUFFERED=1
R=$PWD; L=$OUT/log.txt; say() { echo "== $* ($(date +%T), ${SECONDS}s)" | tee -a "$L"; }
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader | tee -a "$L"
rm -rf /tmp/base /tmp/same && cp -r kernels/mla_verify/csrc /tmp/base && cp -r kernels/mla_verify/csrc /tmp/same
( cd .s32tree/kernels && PYTHONPATH=$PWD python3 -c "from mla_verify._build import load; load('sm_90a')" ) >>"$L" 2>&1 &
for t in /tmp/base /tmp/same; do  # one after the other: identical sources share a cache key
  PYTHONPATH=$R/kernels python3 -c "import sys; from verify_tools.bench import load_tree; load_tree('sm_90a', sys.argv[1])" $t >>"$L" 2>&1
done
PYTHONPATH=$R/kernels python3 -c "from mla_verify._build import load; load('sm_90a')" >>"$L" 2>&1
wait; say built
cd .s32tree/kernels || exit 2
PYTHONPATH=$PWD timeout 240 python3 -m verify_tools.bench --tree-ab base=/tmp/base,same=/tmp/same --ab-kv bf16 --ab-reps 3 \
  --shapes 1:512:8:16,1:4096:8:16,1:32768:8:16,4:4096:4:16,8:32768:8:16 --ab-out "$OUT/ab_revert.json" >/dev/null 2>>"$OUT/ab_err.txt"
echo "ab rc=$?" | tee -a "$L"
PYTHONPATH=$PWD python3 -m verify_tools.bench --ab-summary "$OUT/ab_revert.json" 2>&1 | grep -v "^cupti" | tee -a "$L"
say "ab done"
cd "$R/kernels" || exit 2
export PYTHONPATH=$R/kernels:$R
timeout 130 python3 -m verify_tools.parity --json > "$OUT/parity.json" 2>>"$OUT/parity_err.txt"; echo "parity rc=$?" | tee -a "$L"
python3 -c "import json;d=json.load(open('$OUT/parity.json'));print('parity', d.get('ok'), d.get('summary'))" 2>&1 | tee -a "$L"
cd "$R" && timeout 60 python3 -m pytest -q -p no:cacheprovider tests/kernels/test_kernel_gpu_parity.py > "$OUT/pytest.txt" 2>&1
echo "pytest rc=$?" | tee -a "$L"; tail -2 "$OUT/pytest.txt" | tee -a "$L"
say done
