#!/usr/bin/env bash
# A mini app's backend (issue 31): its cold start (the first /api answer after a stop, through
# handlerd's app origin) and a warm GET through handlerd ÷ the same GET on the backend's own unix
# socket, in the same run; medians of 5 cold starts and 200 warm requests each (run as root
# after .ci/setup-podman.sh; needs the npm registry for the runtime image).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo test -p handler-bins --test it -- --ignored --nocapture --test-threads 1 \
    bench_an_apps_cold_start_and_warm_requests_against_its_own_socket 2>&1 | grep -E '^\{"coldStartMs'
