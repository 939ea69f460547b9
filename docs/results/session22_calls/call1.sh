#!/usr/bin/env bash
# Prepared in session 21 for the next session's first device call (no device time was left): what the
# warp-specialized bf16 kernel still needs before MLAV_WS=1 becomes the default. Call 4 measured it at 0.969-0.979x
# the shipped time on the batched / long shapes, 1.002 at B=1 L=32k, 1.026 at B=1 L=4k (bitwise equal outputs,
# parity 53/53 + 52/52 graph replays, the three sanitizers and the GPU pytest clean). Not yet measured: the
# graph-buffer rows (issue 13: every new kernel within 1.1x of its exact-length call). cur = the checkout with
# MLAV_WS=1, base = the shipped csrc; A/B bf16 with the graph-buffer rows of both trees, then the trace of cur at
# B=1 L=4k (where it loses) and B=8 L=32k, with its producer's wait for a free stage and issue per tile (trace row 2).
# Tree early = cur with ws_early_issue.patch (the producer issues Q and tile 0 before the barrier that publishes the
# mbarriers' init; aimed at B=1's first-tile wait; compiled here: 0 spills, never run): timed beside them, outputs
# compared bitwise with base. Run from the repository root, no carry, ~5 min (the A/B with graph-buffer rows is the long part).
set -o pipefail
export ORCHESTRATOR_KERNEL_CACHE=/tmp/kc MAX_JOBS=16 PYTHONUNBUFFERED=1
R=$PWD; L=$OUT/log.txt; say() { echo "== $* ($(date +%T), ${SECONDS}s)" | tee -a "$L"; }
rm -rf /tmp/base && mkdir -p /tmp/base && cp -r kernels/mla_verify/csrc /tmp/base/csrc
sed -i 's/#define MLAV_WS 0/#define MLAV_WS 1/' kernels/mla_verify/csrc/mla_verify.cu
grep -c "define MLAV_WS 1" kernels/mla_verify/csrc/mla_verify.cu | tee -a "$L"
rm -rf /tmp/early && mkdir -p /tmp/early && cp -r kernels/mla_verify/csrc /tmp/early/csrc
(cd /tmp/early/csrc && git apply -p4 "$R/docs/results/session21_calls/ws_early_issue.patch") && echo "early: patch applied" | tee -a "$L"
export PYTHONPATH=$R/kernels:$R
python3 -c "from mla_verify._build import load; load('sm_90a')" >>"$L" 2>&1 &
for c in /tmp/base/csrc /tmp/early/csrc; do
  python3 -c "import sys; from verify_tools.bench import load_tree; load_tree('sm_90a', sys.argv[1])" "$c" >>"$L" 2>&1 &
done
for c in "$R/kernels/mla_verify/csrc" /tmp/base/csrc; do
  python3 -c "import sys; from verify_tools.bench import load_tree; load_tree('sm_90a', sys.argv[1], extra=['-DMLAV_TRACE=1'])" "$c" >>"$L" 2>&1 &
done
wait; say built
cd kernels || exit 2
SH=1:4096:8:16,1:32768:8:16,1:131072:8:16,4:131072:4:16,8:32768:8:16,32:8192:8:16,2:16384:8:128
timeout 380 python3 -m verify_tools.bench --tree-ab base=/tmp/base/csrc,early=/tmp/early/csrc --ab-kv bf16 --ab-gb-trees cur,base --ab-reps 3 \
  --ab-configs sm90wg --shapes $SH --ab-out "$OUT/ab_bf16.json" >/dev/null 2>>"$L"; echo "ab bf16 rc=$?" | tee -a "$L"
python3 - "$OUT/ab_bf16.json" <<'PY' 2>&1 | tee -a "$L"
import json, sys
d = json.load(open(sys.argv[1]))
for r in d["ab"]:
    print(f"B={r['B']} L={r['L']} n={r['n']} H={r['H']}: {r['us']} over shipped {r.get('ratio_over_base')} bitwise {r.get('bitwise_equal_base')}")
for t in ("cur", "base"):
    g = [r for r in d["graph_buffer"] if r["tree"] == t]
    print(t, "graph-buffer max ratio", max((r["ratio"] for r in g), default=None), "all bitwise", all(r["replay_equal_exact_bitwise"] for r in g), len(g), "rows")
PY
cd "$R" || exit 2
timeout 80 python3 tests/device/dense_trace.py 1:4096:8:16,8:32768:8:16 --out "$OUT/trace_ws.json" 2>>"$L" | grep '^\[trace\]' | tee -a "$L"
timeout 80 python3 tests/device/dense_trace.py 1:4096:8:16 --csrc /tmp/base/csrc --out "$OUT/trace_base.json" 2>>"$L" | grep '^\[trace\]' | tee -a "$L"
say done
