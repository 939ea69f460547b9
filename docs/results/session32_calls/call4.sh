#!/usr/bin/env bash
# Session 32, call 4 (no carry; ~2 min): the split rule's weight where SGLang runs the kernel, CUDA graphs captured on
# max-sized buffers: tests/device/rule_ab.py, weights 0 (the plain rule) and 54 (call 3's fit), alternated twice in
# one process. Ship 54 if its graph replays are no slower (<= 1.01) where its count differs (B=1 L=4k / 6k, (4, 2048,
# 4, 16)) and unchanged (within noise) elsewhere.
export ORCHESTRATOR_KERNEL_CACHE=/tmp/kc MAX_JOBS=16 PYTHONUNBUFFERED=1 PYTHONPATH=$PWD/kernels:$PWD
nvidia-smi -L | head -1
python3 -c "from mla_verify._build import load; load('sm_90a')" > "$OUT/build.txt" 2>&1 || { tail -5 "$OUT/build.txt"; exit 3; }
timeout 200 python3 tests/device/rule_ab.py --weights 0,54 --rounds 2 --out "$OUT/rule_ab.json" 2>"$OUT/rule_ab_err.txt"
echo "rc=$?"; grep -v "^\[bench\]" "$OUT/rule_ab_err.txt" | tail -3
