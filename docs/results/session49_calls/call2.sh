#!/usr/bin/env bash
# Session 49 call 2 (~180 s, no carry): session 48's prepared dense call (gated pair order), held to 180 s.
CALL_BUDGET_S=${CALL_BUDGET_S:-180} exec bash docs/results/session48_calls/next_call1.sh
