#!/usr/bin/env bash
# Session 43, call 3 (no carry, nvidia-h100-x1; ~150 s, the device time left): the shipped dispatch (api.fp8_f16: the
# warp-specialized fp8 kernel, launch flag 2, where a split holds >= 2,048 prefix tokens).
# 1. the GPU tests of the fp8 arithmetics (incl. the new bitwise test of the two f16 kernels);
# 2. the phase-2 bench on (4, 131072, 4, 16) and B=1 L=32k with their fp8 rows (graphs: the bf16 decode, as the
#    capture rule keeps it; eager auto: the warp-specialized kernel at (4, 131072, 4, 16), the F16 one at B=1 32k).
set -o pipefail
. tests/device/call_budget.sh 150  # R, L, left, say, lim
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader | tee -a "$L"
cd kernels || exit 2
python3 -c "from mla_verify._build import load; load('sm_90a')" >>"$L" 2>&1 || { tail -5 "$L"; exit 3; }
say built
timeout "$(lim 40)" python3 -m pytest -q -p no:cacheprovider -m gpu "$R/tests/kernels/test_kernel_gpu_parity.py" \
  -k "fp8" 2>&1 | tail -4 | tee -a "$L"
say pytest
timeout "$(lim 90)" python3 -m verify_tools.bench --json --no-sglang --no-flashmla --fp8 \
  --shapes 4:131072:4:16,1:32768:8:16 > "$OUT/bench.json" 2>>"$OUT/bench_err.txt"
echo "bench rc=$?" | tee -a "$L"
grep '^\[bench\]' "$OUT/bench_err.txt" | tee -a "$L"
python3 -c "import json, sys; d = json.load(open(sys.argv[1])); print('bench', d.get('ok'), d.get('summary'))" \
  "$OUT/bench.json" 2>&1 | tee -a "$L"
say done
