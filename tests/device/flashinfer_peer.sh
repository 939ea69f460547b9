#!/usr/bin/env bash
# The dense kernel against FlashInfer's MLA paged attention (FA2 and FA3 backends), same inputs and
# same run (verify_tools.bench's flashinfer_peer), on the device machine.
# Carry `.whl-fi` (git-ignored; not committed): flashinfer-python 0.7.2.post1 with its
# flashinfer/data/csrc/*/ subfolders removed (MLA JIT needs only the top-level csrc files, include/,
# cutlass/, cccl/), zipped as flashinfer_python-0.7.2.post1-stripped.zip, plus the cp312 wheels of
# apache-tvm-ffi, nvidia-ml-py and tabulate. SGLang's peers are not run here (the 64 MiB carry
# limit does not hold both wheel sets): `--no-sglang`.
# Optional carry `.whl-flashmla` (tests/device/flashmla_peer.sh says what it is): FlashMLA's dense
# decode joins the same bench as a third peer. GRAPH_BUFFER=1: then the bench's graph-buffer mode
# (GRAPH_BUFFER_SHAPES x GRAPH_BUFFER_LENS, ours only) in a second process, bench_graph_buffer.json.
# Usage: bash tests/device/flashinfer_peer.sh [B:L:n:H,...]    (JSON + log under $OUT)
set -o pipefail
SHAPES=${1:-1:4096:8:16,1:32768:8:16,1:131072:8:16,8:32768:8:16,32:8192:8:16,4:65536:4:64}
OUT=${OUT:-/tmp/fi-out}; mkdir -p "$OUT"
LOG="$OUT/fi_log.txt"
export PYTHONUNBUFFERED=1 MAX_JOBS=16 ORCHESTRATOR_KERNEL_CACHE=/tmp/mlav-cache FLASHINFER_CUDA_ARCH_LIST=9.0a
export FLASHINFER_WORKSPACE_BASE=/tmp/fi-ws
if [ ! -d .whl-fi ]; then echo "blocked: .whl-fi not carried" | tee -a "$LOG"; exit 75; fi
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/fisite .whl-fi/*.whl >>"$LOG" 2>&1
python3 -m zipfile -e .whl-fi/flashinfer_python-0.7.2.post1-stripped.zip /tmp/fisite >>"$LOG" 2>&1
export PYTHONPATH=/tmp/fisite:$PWD/kernels
if [ -d .whl-flashmla ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/fmsite .whl-flashmla/*.whl \
    >>"$LOG" 2>&1 && export PYTHONPATH=/tmp/fmsite:$PYTHONPATH
fi
echo "== $(nvidia-smi -L 2>&1 | head -1); shapes $SHAPES ($(date +%T))" | tee -a "$LOG"
python3 -c "import flashinfer; print('flashinfer', flashinfer.__version__)" 2>&1 | tail -2 | tee -a "$LOG"
cd kernels && timeout "${FI_TIMEOUT_S:-420}" python3 -m verify_tools.bench --json --no-sglang --no-graph-buffer \
  --shapes "$SHAPES" > "$OUT/bench_flashinfer.json" 2> >(tee -a "$LOG" >&2)
echo "bench rc=$?" | tee -a "$LOG"
if [ "${GRAPH_BUFFER:-}" = 1 ]; then
  timeout "${GB_TIMEOUT_S:-240}" python3 -m verify_tools.bench --json --no-sglang --no-flashmla --graph-buffer \
    --shapes 1:4096:8:16 > "$OUT/bench_graph_buffer.json" 2> >(tee -a "$LOG" >&2)
  echo "graph-buffer bench rc=$?" | tee -a "$LOG"
  python3 -c "import json, sys; d = json.load(open(sys.argv[1])); s = d.get('summary', {}); print({k: v for k, v in s.items() if 'graph' in k})" \
    "$OUT/bench_graph_buffer.json" 2>&1 | tee -a "$LOG"
fi
python3 - "$OUT/bench_flashinfer.json" <<'PY' | tee -a "$LOG"
import json, sys
d = json.load(open(sys.argv[1]))
for r in d.get("rows", []):
    fa2, fa3 = r.get("flashinfer_fa2_us"), r.get("flashinfer_fa3_us")
    shape = (r.get("B"), r.get("L"), r.get("n"), r.get("H"))
    def ratio(x):
        return f"{x / r['new_us']:.2f}x" if x else r.get("flashinfer_fa3_skipped", "skipped")[:60]
    fm = r.get("flashmla_us")
    print(shape, f"ours {r['new_us']:.1f}us", f"fa2 {fa2}", f"fa3 {fa3}", f"flashmla {fm}", "ours speed vs fa3:", ratio(fa3),
          "vs fa2:", ratio(fa2), "vs flashmla:", f"{fm / r['new_us']:.2f}x" if fm else r.get("flashmla_skipped", "skipped")[:60])
PY
