#!/usr/bin/env bash
# Prepares the web UI's checks and its browser suite (issue 17, decisions 0105-0107). Run as root;
# idempotent. What it does:
#   - installs Debian's chromium (the browser suite drives /usr/bin/chromium with playwright-core;
#     Playwright's own browser download cannot work here);
#   - installs the UI's packages from the npm registry (`npm ci`, package-lock.json);
#   - rebuilds the UI's API types and its dist/ aside and fails when they differ from the committed
#     ones (handlerd embeds dist/: it must be exactly what the sources build);
#   - type-checks the UI (svelte-check) and runs the unit tests of src/lib (vitest).
set -euo pipefail
cd "$(dirname "$0")/.."
log() { echo "setup-browser: $*" >&2; }

if [ "$(id -u)" -ne 0 ]; then
    echo "setup-browser.sh: run me as root" >&2
    exit 1
fi

if ! dpkg-query -W -f='${Status}' chromium 2>/dev/null | grep -q "install ok installed"; then
    log "installing chromium"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq chromium >/dev/null
fi
command -v node >/dev/null || { log "node is missing (the machine's Node.js 20)"; exit 1; }

web=handler-core/web
log "npm ci in $web"
(cd "$web" && npm ci --no-audit --no-fund --loglevel=error)
# The test user runs the browser suite's node script: it must read the packages.
chmod -R a+rX "$web/node_modules"

aside="$(mktemp -d)"
trap 'rm -rf "$aside"' EXIT
log "checking that api-types.ts and dist/ are what the sources build"
(cd "$web" && npx openapi-typescript openapi.json -o "$aside/api-types.ts" >/dev/null 2>&1)
if ! diff -u "$web/src/lib/api-types.ts" "$aside/api-types.ts" >&2; then
    log "src/lib/api-types.ts is not what openapi.json generates: run npm run gen-api in $web"
    exit 1
fi
(cd "$web" && npx vite build --outDir "$aside/dist" --emptyOutDir --logLevel error)
if ! diff -r "$web/dist" "$aside/dist" >&2; then
    log "dist/ is not what the sources build: run npm run build in $web and commit dist/"
    exit 1
fi
log "the UI's types (svelte-check) and the unit tests of src/lib (vitest)"
(cd "$web" && npx svelte-check --tsconfig ./tsconfig.json --fail-on-warnings --output machine >/dev/null) \
    || { (cd "$web" && npx svelte-check --tsconfig ./tsconfig.json --fail-on-warnings) >&2; exit 1; }
(cd "$web" && npx vitest run --reporter=dot >&2)
log "ok"
