#!/usr/bin/env bash
# Session 26 call 4 (no carry): phase 2's own command on the shipped kernel at 942674e, `verify_tools.bench --json`
# with its default shapes, fp8 rows and graph-buffer rows; SGLang's and FlashMLA's peers are not carried (skipped with
# their reason), so min_speedup_vs_sglang_extend reads null here. The summary is what phases/2-microbench.yaml gates.
set -o pipefail
export ORCHESTRATOR_KERNEL_CACHE=/tmp/kc MAX_JOBS=16 PYTHONUNBUFFERED=1 PYTHONPATH=$PWD/kernels:$PWD
cd kernels && timeout 540 python3 -m verify_tools.bench --json --no-sglang --no-flashmla > "$OUT/bench_phase2.json" 2> "$OUT/bench_phase2_log.txt"
echo "bench rc=$?"; tail -30 "$OUT/bench_phase2_log.txt"
python3 -c "import json, sys; print(json.dumps(json.load(open(sys.argv[1]))['summary']))" "$OUT/bench_phase2.json"
