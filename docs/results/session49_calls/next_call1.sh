#!/usr/bin/env bash
# Prepared in session 49 (device lending paused after six failed starts: never ran), for the next session, ~420 s, no
# carry:   bash docs/results/session49_calls/next_call1.sh
# 1. The DSA call (dsa_call.sh, held to 200 s; its files under $OUT/dsa): bf16 partials A/B, parity, timeline.
# 2. Session 48's prepared dense call (next_call1.sh there, held to 200 s): the gated pair's order.
# CALL_BUDGET_S=N holds each half to N s instead.
mkdir -p "$OUT/dsa"
OUT=$OUT/dsa CALL_BUDGET_S=${CALL_BUDGET_S:-200} bash docs/results/session49_calls/dsa_call.sh
git status --short | head -5
CALL_BUDGET_S=${CALL_BUDGET_S:-200} bash docs/results/session48_calls/next_call1.sh
