#!/usr/bin/env bash
# Session 39, not run (its start was declined: too little device budget left after nine refused starts).
# Session 38's next_call1.sh cut to fit ~250 s of device budget, no carry:
#   CALL_BUDGET_S=190 bash docs/results/session39_calls/lean_call1.sh
# Same trees as next_call1.sh less e4b, nlb and nle5: cur = E4f (e4e5.patch, MLAV_ASYM_PV_SPLIT=1), e5 = E4f with
# MLAV_ASYM_V_SPLIT=1, base = the shipped csrc. Steps: parity on E4f (is the fenced form deterministic?); the A/B
# base / e5 / cur on the ASYM rows and B=1 L=4k; parity on e5. No sanitizers (no budget): nothing can ship from this
# call alone; a form that passes here still needs racecheck and synccheck (next_call1.sh's last step).
set -o pipefail
. tests/device/call_budget.sh 190  # R, L, left, say, lim
. tests/device/call_steps.sh       # build_trees, use, check
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader | tee -a "$L"
C=$MLAV_CSRC; H=$MLAV_WS_H
rm -rf /tmp/base && cp -r $C /tmp/base
git apply docs/results/session38_calls/e4e5.patch 2>>"$L" || { echo "e4e5.patch did not apply" | tee -a "$L"; exit 4; }
rm -rf /tmp/cur /tmp/e5 && cp -r $C /tmp/cur && cp -r $C /tmp/e5
sed -i 's|^#define MLAV_ASYM_V_SPLIT 0|#define MLAV_ASYM_V_SPLIT 1|' /tmp/e5/$H
grep -q 'define MLAV_ASYM_V_SPLIT 1' /tmp/e5/$H || { echo "tree edit failed" | tee -a "$L"; exit 4; }
build_trees base e5
say built
cd kernels || exit 2
check e4f
say "e4f parity"
timeout "$(lim 80)" python3 -m verify_tools.bench --tree-ab base=/tmp/base,e5=/tmp/e5 --ab-kv bf16 --ab-reps 3 \
  --ab-gb-trees cur --shapes 8:32768:8:16,32:8192:8:16,4:65536:4:64,2:16384:8:128,1:4096:8:16 \
  --ab-out "$OUT/ab.json" >/dev/null 2>>"$OUT/ab_err.txt"
echo "ab rc=$?" | tee -a "$L"
python3 -m verify_tools.bench --ab-summary "$OUT/ab.json" 2>&1 | tee -a "$L"
say "ab done"
use e5
check e5
say done
