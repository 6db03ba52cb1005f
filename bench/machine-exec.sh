#!/usr/bin/env bash
# A machine's exec cost (issue 29): `handler-sandbox-{podman,docker} machine exec` of `true` in a
# running machine ÷ the engine's own `exec` of it, alternated, medians, as the test user (run as
# root after .ci/setup-podman.sh and .ci/setup-docker.sh). ROUNDS (default 15).
set -euo pipefail
cd "$(dirname "$0")/.."
HANDLER_BENCH_ROUNDS="${1:-15}" cargo test -p handler-bins --test it -- --ignored --nocapture \
    --test-threads 1 bench_exec_against_the_engines_exec 2>&1 | grep -oE 'BENCH.*'
