#!/usr/bin/env bash
# Listings from memory (issue 34 item 5, decision 0149): through handlerd on real rootless Podman,
# p50/p99 of GET /v1/harnesses, /v1/runtime and /v1/network-filter against the same routes
# ?fresh=true (asked of the engine) and GET /v1/agents, 1 and 8 clients (run as root after
# .ci/setup-podman.sh). ROUNDS (default 40).
set -euo pipefail
cd "$(dirname "$0")/.."
HANDLER_BENCH_ROUNDS="${1:-40}" cargo test -p handler-bins --test it -- --ignored --nocapture \
    --test-threads 1 bench_listings_from_memory_against_the_engine 2>&1 | grep -oE 'BENCH.*'
