#!/usr/bin/env bash
# Installs Handler into a folder of binaries (decision 0071): handlerd, handler and
# handler-sandbox-podman (release builds) and, beside them, the *static* handler-egress-proxy (the
# same build, linked static: decision 0177) the network filter image is made of (`image
# build-proxy` finds it beside handler-sandbox-podman, which handlerd finds beside itself): an
# installed handlerd builds its network filter without a source tree or HANDLER_EGRESS_PROXY_BIN.
#
# Usage: .ci/install.sh [--built PROXY] DEST
#   DEST     the folder the binaries go to (made when missing), e.g. ~/.local/bin
#   --built  skip the builds: take the release binaries from $CARGO_TARGET_DIR/release (default
#            ./target) and the static proxy PROXY (a static build of handler-egress-proxy, e.g.
#            what fixtures/egress/build-static-proxy.sh printed).
set -euo pipefail
cd "$(dirname "$0")/.."
repo="$(pwd)"
proxy=""
if [ "${1:-}" = --built ]; then proxy="${2:?--built wants the static proxy}"; shift 2; fi
dest="${1:?usage: .ci/install.sh [--built PROXY] DEST}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$repo/target}"
if [ -z "$proxy" ]; then
    if ! cargo build --release --locked -p handler-bins --bin handlerd --bin handler --bin handler-sandbox-podman >&2; then
        echo "install: the release build failed" >&2
        exit 1
    fi
    # The static proxy from the same build (issue 34 item 3, decision 0177): `cargo rustc` gives
    # the extra flags to the proxy's own crate only, so it links the libraries just compiled —
    # glibc statically (static-pie), symbols stripped — instead of building them all again for
    # a target of their own (a second build that took a third of the install's time).
    if ! cargo rustc --release --locked -p handler-bins --bin handler-egress-proxy -- \
        -C target-feature=+crt-static -C strip=symbols >&2; then
        echo "install: the static proxy's build failed" >&2
        exit 1
    fi
    proxy="$CARGO_TARGET_DIR/release/handler-egress-proxy"
fi
if file "$proxy" 2>/dev/null | grep -q "dynamically linked"; then
    echo "install: $proxy is not static (the network filter image is FROM scratch)" >&2
    exit 1
fi
install -d -m 755 "$dest"
for b in handlerd handler handler-sandbox-podman; do
    install -m 755 "$CARGO_TARGET_DIR/release/$b" "$dest/$b"
done
install -m 755 "$proxy" "$dest/handler-egress-proxy"
echo "install: $dest: $(cd "$dest" && ls handlerd handler handler-sandbox-podman handler-egress-proxy | tr '\n' ' ')" >&2
# The Dev Container CLI (decision 0161), pinned in .ci/devcontainer-cli.txt, beside the runtime
# (handler-sandbox-podman looks for `devcontainer` there first). Without npm, dev container
# machines are refused saying so; everything else works.
if command -v npm >/dev/null 2>&1; then
    npm install --silent --no-audit --no-fund --prefix "$dest/lib/devcontainer-cli" \
        "$(cat .ci/devcontainer-cli.txt)" >&2
    ln -sf lib/devcontainer-cli/node_modules/.bin/devcontainer "$dest/devcontainer"
    echo "install: $dest/devcontainer: the Dev Container CLI $("$dest/devcontainer" --version)" >&2
else
    echo "install: npm is missing: dev container machines need the Dev Container CLI (apt install npm, then run me again)" >&2
fi
