#!/usr/bin/env bash
# Session 49 call 1 (~400 s, no carry): the DSA call, then session 48's prepared dense call (its log under $OUT),
# each held to 200 s by CALL_BUDGET_S (every step's timeout is the smaller of its own and what is left).
mkdir -p "$OUT/dsa"
OUT=$OUT/dsa CALL_BUDGET_S=200 bash docs/results/session49_calls/dsa_call.sh
git status --short | head -5
CALL_BUDGET_S=200 bash docs/results/session48_calls/next_call1.sh
