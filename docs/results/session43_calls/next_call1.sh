#!/usr/bin/env bash
# Superseded: session 44 ran its steps in docs/results/session44_calls/call1.sh (with a ring variant beside them).
# Prepared in session 43 (its device time ran out before it could run), not run. The next session's first command,
# no carry (name kind nvidia-h100-x1), ~330 s: bash docs/results/session43_calls/next_call1.sh
# 1. the GPU tests of the fp8 arithmetics (incl. test_warp_specialized_fp8_kernel_is_bitwise_the_f16_kernel) and the
#    parity case whose f16 path takes the warp-specialized kernel by the shipped rule (fp8_b8_long_splits_ws_h16);
# 2. the phase-2 bench on (4, 131072, 4, 16) and B=1 L=32k with their fp8 rows (graphs: the bf16 decode, as the
#    capture rule keeps it; eager auto: the warp-specialized kernel at (4, 131072, 4, 16), the F16 one at B=1 32k);
# 3. A/B with the bf16 cache against session 42's csrc (ws_fp8.patch reversed): adding the fp8 kernel to the module
#    moved four address instructions in the ASYM kernel's producer (+128 B of SASS, same PTX ops), every other kernel
#    byte-identical; the ASYM rows check that this costs nothing (expect 1.00 within the spread, bitwise);
# 4. where the warp-specialized fp8 kernel starts to pay (tiles.TileConfig.fp8_ws_min_tokens, 2,048 unmeasured): with
#    it forced on (fp8_ws_min_tokens 64 in this process) the f16 path of cur runs it and base (session 42's module,
#    which takes flag 2 as its F16 kernel) the F16 kernel, at 128 / 256 / 1,024 / 2,048 tokens per split.
set -o pipefail
. tests/device/call_budget.sh 330  # R, L, left, say, lim
. tests/device/call_steps.sh       # build_trees
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader | tee -a "$L"
C=$MLAV_CSRC; D=docs/results/session43_calls
{ git apply -R $D/ws_fp8.patch && rm -rf /tmp/base && cp -r $C /tmp/base && git apply $D/ws_fp8.patch; } 2>>"$L" \
  || { echo "patch did not apply" | tee -a "$L"; exit 4; }
grep -q ws_fp8 $C/mla_verify.cu && ! grep -q ws_fp8 /tmp/base/mla_verify.cu || { echo "trees wrong" | tee -a "$L"; exit 4; }
build_trees base
say built
cd kernels || exit 2
timeout "$(lim 40)" python3 -m pytest -q -p no:cacheprovider -m gpu "$R/tests/kernels/test_kernel_gpu_parity.py" \
  -k "fp8" 2>&1 | tail -4 | tee -a "$L"
say pytest
timeout "$(lim 40)" python3 -m verify_tools.parity --cases fp8_b8_long_splits_ws_h16 --configs sm90wg --json \
  > "$OUT/parity_ws.json" 2>>"$OUT/parity_err.txt"
echo "parity ws rc=$?" | tee -a "$L"
python3 -c "import json, sys; d = json.load(open(sys.argv[1])); print('parity', d.get('ok'), d.get('summary'))" \
  "$OUT/parity_ws.json" 2>&1 | tee -a "$L"
say parity
timeout "$(lim 90)" python3 -m verify_tools.bench --json --no-sglang --no-flashmla --fp8 \
  --shapes 4:131072:4:16,1:32768:8:16 > "$OUT/bench.json" 2>>"$OUT/bench_err.txt"
echo "bench rc=$?" | tee -a "$L"
grep '^\[bench\]' "$OUT/bench_err.txt" | tee -a "$L"
python3 -c "import json, sys; d = json.load(open(sys.argv[1])); print('bench', d.get('ok'), d.get('summary'))" \
  "$OUT/bench.json" 2>&1 | tee -a "$L"
say bench
timeout "$(lim 70)" python3 -m verify_tools.bench --tree-ab base=/tmp/base --ab-kv bf16 --ab-reps 3 --ab-gb-trees none \
  --shapes 8:32768:8:16,32:8192:8:16,4:65536:4:64 --ab-out "$OUT/ab_asym.json" >/dev/null 2>>"$OUT/ab_err.txt"
echo "ab rc=$?" | tee -a "$L"
python3 -m verify_tools.bench --ab-summary "$OUT/ab_asym.json" 2>&1 | tee -a "$L"
say "ab asym"
timeout "$(lim 80)" python3 - "$OUT/ab_ws_min.json" >/dev/null 2>>"$OUT/ab_err.txt" <<'PY'
import dataclasses, sys
from mla_verify import tiles
tiles.DEFAULT_CONFIG["sm_90a"] = dataclasses.replace(tiles.SM90WG, fp8_ws_min_tokens=64)
from verify_tools import bench
bench.main(["--tree-ab", "base=/tmp/base", "--ab-kv", "fp8", "--ab-fp8-paths", "f16", "--ab-reps", "3",
            "--ab-gb-trees", "none", "--shapes", "1:8192:8:16,1:16384:8:16,1:65536:8:16,1:131072:8:16,4:32768:4:16",
            "--ab-out", sys.argv[1]])
PY
echo "ab ws_min rc=$?" | tee -a "$L"
python3 -m verify_tools.bench --ab-summary "$OUT/ab_ws_min.json" 2>&1 | tee -a "$L"
say done
