#!/usr/bin/env bash
# Session 49 call 1 (~480 s, no carry): the DSA call, then session 48's prepared dense call (its log under $OUT).
mkdir -p "$OUT/dsa"
OUT=$OUT/dsa bash docs/results/session49_calls/dsa_call.sh
git status --short | head -5
bash docs/results/session48_calls/next_call1.sh
