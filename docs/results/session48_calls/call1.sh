#!/usr/bin/env bash
# Session 48 call 1 (H100, 23:38-23:42 UTC, no carry): session 47's prepared TH call, run as prepared.
exec bash docs/results/session47_calls/next_call1.sh
