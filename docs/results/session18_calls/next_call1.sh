#!/usr/bin/env bash
# Prepared in session 18 for the next session's first device call (not run: the device time was spent): the capture
# rule of fp8 auto (3366cbc: a CUDA-graph capture keeps the bf16 decode, eager calls take the F16 kernel where a
# split's chunk holds >= 256 tokens) on the GPU, and the first run of the dense trace build. Run from the repository
# root with $OUT set (no carry), ~7 min:
# (1) dense + DSA GPU pytest (the graph test captures auto on max-sized buffers and compares with the bf16 decode;
# both fp8 arithmetics against the oracle), (2) the bench's fp8 rows on three shapes: fp8_us (a captured auto call:
# the bf16 decode), fp8_paths_us (each arithmetic), fp8_eager_path and summary.fp8_eager_over_bf16_mem_shape.
set -o pipefail
export ORCHESTRATOR_KERNEL_CACHE=/tmp/kc MAX_JOBS=16 PYTHONUNBUFFERED=1
R=$PWD; L=$OUT/log.txt; say() { echo "== $* ($(date +%T), ${SECONDS}s)" | tee -a "$L"; }
cd kernels || exit 2
export PYTHONPATH=$PWD:$R
python3 -c "from mla_verify._build import load; load('sm_90a')" >>"$L" 2>&1; say built
(cd "$R" && timeout 200 python3 -m pytest -q -p no:cacheprovider tests/kernels/test_kernel_gpu_parity.py tests/kernels/test_dsa_gpu.py 2>&1 | tail -3) | tee -a "$L"
timeout 240 python3 -m verify_tools.bench --json --fp8 --no-graph-buffer --no-sglang --no-flashmla \
  --shapes 4:131072:4:16,1:4096:8:16,1:32768:8:16 > "$OUT/bench_fp8_paths.json" 2>>"$L"
echo "bench rc=$?" | tee -a "$L"
python3 - "$OUT/bench_fp8_paths.json" <<'PY' 2>&1 | tee -a "$L"
import json, sys
d = json.load(open(sys.argv[1]))
s = d["summary"]
print("fp8/bf16 mem shape: captured auto", s.get("fp8_over_bf16_mem_shape"), "eager", s.get("fp8_eager_over_bf16_mem_shape"))
for r in d["rows"]:
    print(r["B"], r["L"], r["n"], r["H"], "bf16", round(r["new_us"], 2), "fp8 (captured auto)", round(r.get("fp8_us", 0), 2),
          "paths", r.get("fp8_paths_us"), "eager path", r.get("fp8_eager_path"))
PY
# (3) where a tile's ~5,000 cycles go (the trace build, -DMLAV_TRACE=1: SM cycles per phase per tile, per warpgroup;
# issue 13's per-tile schedule is the lever for every remaining target): bf16, and fp8 on each arithmetic.
cd "$R" || exit 2
SH=1:4096:8:16,1:32768:8:16,4:131072:4:16,8:32768:8:16
timeout 200 python3 tests/device/dense_trace.py $SH --out "$OUT/trace_bf16.json" 2>>"$L" | grep '^\[trace\]' | tee -a "$L"
for fp in bf16 f16; do
  timeout 150 python3 tests/device/dense_trace.py $SH --fp8 --fp8-path $fp --out "$OUT/trace_fp8_$fp.json" 2>>"$L" | grep '^\[trace\]' | tee -a "$L"
done
say done
# Then, as a second call with carry [".whl", ".whl-plugin", ".whl-pydantic"] (~4 min): the fp8_e4m3 dense route
# (9263297) through SGLang's own TritonAttnBackend on its fp8 pool, token-exact against the oracle, and the graph
# capture of the plugin path:  bash tests/device/plugin_check.sh quick
