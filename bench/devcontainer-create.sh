#!/usr/bin/env bash
# A dev container machine's create (decision 0161): through handlerd, POST /v1/machines of a
# folder's dev container (the Dev Container CLI on a staged copy of a file naming the busybox
# test image) ÷ of a machine from that image, each deleted after, alternated, medians (run as
# root after .ci/setup-podman.sh). ROUNDS (default 9).
set -euo pipefail
cd "$(dirname "$0")/.."
HANDLER_BENCH_ROUNDS="${1:-9}" cargo test -p handler-bins --test it -- --ignored --nocapture \
    --test-threads 1 bench_a_dev_container_create_against_an_image_machine_create 2>&1 | grep -oE 'BENCH.*'
