#!/usr/bin/env bash
# Builds the local images Handler's main job needs, in the rootless image store of the unprivileged
# user sandboxes run as ($HANDLER_TEST_USER, default handler-test; .ci/setup-podman.sh creates it).
# No container registry is needed. Run as root; idempotent: an image that exists is kept, unless
# HANDLER_REBUILD_IMAGES names it (words: base, toolbox, proxy, a harness name; or 1 for all).
# What it builds, in order:
#   1. localhost/handler-debian-base:trixie  debootstrap --variant=minbase trixie from the Debian
#      mirror ($HANDLER_DEBIAN_MIRROR), imported. It trusts the CA bundle $HANDLER_BUILD_CA_BUNDLE
#      (default: the host's /etc/ssl/certs/ca-certificates.crt, which carries local and company
#      CAs): image builds reach npm and PyPI through whatever the host trusts.
#   2. localhost/handler-ai-toolbox:latest   handler-harness/data/toolbox/Containerfile, FROM (1).
#   3. <image>:latest of each harness in $HANDLER_HARNESSES (default: codex), from
#      handler-harness/data/harnesses/<name>/Containerfile, FROM (2); <image> is the descriptor's.
#   4. localhost/handler-network-filter:latest  the egress proxy (`image build-proxy`).
# (2)–(4) are built by the sandbox runtime's own verbs (`handler-sandbox-podman image build`,
# `image build-proxy`), run as the user.
#
# Usage: .ci/build-images.sh --bin-dir DIR | --base-only
#   DIR holds handler-sandbox-podman and a static handler-egress-proxy, readable by the user.
#   --base-only: only (1), the step that needs root (debootstrap); `handler setup` builds the
#   rest through handlerd (.ci/quickstart). Timings and podman's output go to stderr.
set -euo pipefail
cd "$(dirname "$0")/.."
repo="$(pwd)"

USER_NAME="${HANDLER_TEST_USER:-handler-test}"
MIRROR="${HANDLER_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
SUITE="${HANDLER_DEBIAN_SUITE:-trixie}"
CA_BUNDLE="${HANDLER_BUILD_CA_BUNDLE-/etc/ssl/certs/ca-certificates.crt}"
HARNESSES="${HANDLER_HARNESSES:-codex}"
BASE_IMAGE="localhost/handler-debian-base:$SUITE"
TOOLBOX_IMAGE="localhost/handler-ai-toolbox:latest"
PROXY_IMAGE="localhost/handler-network-filter:latest"

bin_dir=""
base_only=""
while [ $# -gt 0 ]; do
    case "$1" in
        --bin-dir) bin_dir="$2"; shift 2 ;;
        --base-only) base_only=1; shift ;;
        *) echo "build-images: unknown argument $1" >&2; exit 2 ;;
    esac
done
[ -n "$bin_dir$base_only" ] || { echo "build-images: usage: $0 --bin-dir DIR | --base-only" >&2; exit 2; }
[ "$(id -u)" -eq 0 ] || { echo "build-images: run me as root" >&2; exit 1; }
id -u "$USER_NAME" >/dev/null 2>&1 || { echo "build-images: no user $USER_NAME: run .ci/setup-podman.sh first" >&2; exit 1; }
USER_HOME="$(getent passwd "$USER_NAME" | cut -d: -f6)"
SANDBOX="$bin_dir/handler-sandbox-podman"
[ -n "$base_only" ] || [ -x "$SANDBOX" ] || { echo "build-images: $SANDBOX is missing" >&2; exit 1; }

log() { echo "build-images: $*" >&2; }
as_user() {
    setpriv --reuid="$USER_NAME" --regid="$USER_NAME" --init-groups \
        env -i HOME="$USER_HOME" USER="$USER_NAME" LOGNAME="$USER_NAME" \
        PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin TMPDIR=/var/tmp "$@"
}
rebuild() { # key → whether HANDLER_REBUILD_IMAGES asks for it
    [ "${HANDLER_REBUILD_IMAGES:-}" = 1 ] || [[ " ${HANDLER_REBUILD_IMAGES:-} " == *" $1 "* ]]
}
exists() { # key image
    ! rebuild "$1" && as_user podman image exists "$2"
}
timed() { # label command…
    local t0=$SECONDS
    "${@:2}"
    log "$1 took $((SECONDS - t0)) s"
}
# A build context the user can read (the repository may be in root's home).
work="$(mktemp -d /var/tmp/handler-images.XXXXXX)"
trap 'rm -rf "$work"' EXIT
chmod 755 "$work"
context_of() { # source-dir name → copy path
    local dst="$work/$2"
    rm -rf "$dst"
    cp -r "$1" "$dst"
    chmod -R a+rX "$dst"
    echo "$dst"
}

# 1. The Debian base, by debootstrap.
build_base() {
    command -v debootstrap >/dev/null || {
        log "installing debootstrap"
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends debootstrap >&2
    }
    local root="$work/rootfs"
    log "debootstrap --variant=minbase $SUITE from $MIRROR"
    debootstrap --variant=minbase "$SUITE" "$root" "$MIRROR" >"$work/debootstrap.log" 2>&1 || {
        tail -20 "$work/debootstrap.log" >&2
        return 1
    }
    # The CAs image builds trust: update-ca-certificates (run when the toolbox installs
    # ca-certificates) adds every certificate under /usr/local/share/ca-certificates.
    if [ -n "$CA_BUNDLE" ]; then
        [ -r "$CA_BUNDLE" ] || { log "HANDLER_BUILD_CA_BUNDLE: cannot read $CA_BUNDLE"; return 1; }
        local cadir="$root/usr/local/share/ca-certificates/handler-build"
        mkdir -p "$cadir"
        awk -v dir="$cadir" '
            /-----BEGIN CERTIFICATE-----/ { n++; f = sprintf("%s/host-%03d.crt", dir, n) }
            f { print > f }
            /-----END CERTIFICATE-----/ { close(f); f = "" }' "$CA_BUNDLE"
        log "the base trusts $(ls "$cadir" | wc -l) certificates from $CA_BUNDLE"
    fi
    rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
    tar -C "$root" -cf "$work/rootfs.tar" .
    rm -rf "$root"
    chmod 644 "$work/rootfs.tar"
    as_user podman import \
        --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
        --change 'CMD ["/bin/bash"]' \
        "$work/rootfs.tar" "$BASE_IMAGE" >/dev/null
    rm -f "$work/rootfs.tar"
}
# An image built now makes every image FROM it be built again (HANDLER_REBUILD_IMAGES grows).
if exists base "$BASE_IMAGE"; then log "$BASE_IMAGE exists"; else
    timed "$BASE_IMAGE" build_base
    HANDLER_REBUILD_IMAGES="${HANDLER_REBUILD_IMAGES:-} toolbox"
fi
[ -z "$base_only" ] || exit 0

# 2. The toolbox, by the sandbox runtime's build verb.
build_toolbox() {
    local ctx
    ctx="$(context_of "$repo/handler-harness/data/toolbox" toolbox)"
    as_user "$SANDBOX" image build "$ctx" --tag "$TOOLBOX_IMAGE" --build-arg "BASE_IMAGE=$BASE_IMAGE" >/dev/null
}
if exists toolbox "$TOOLBOX_IMAGE"; then log "$TOOLBOX_IMAGE exists"; else
    timed "$TOOLBOX_IMAGE" build_toolbox
    HANDLER_REBUILD_IMAGES="${HANDLER_REBUILD_IMAGES:-} $HARNESSES"
fi

# 3. Harness images, tagged as their descriptors say.
for name in $HARNESSES; do
    dir="$repo/handler-harness/data/harnesses/$name"
    [ -f "$dir/Containerfile" ] || { log "no harness $name (no $dir/Containerfile)"; exit 1; }
    image="$(sed -n 's/^image *= *"\(.*\)"/\1/p' "$dir/harness.toml")"
    [ -n "$image" ] || { log "$dir/harness.toml names no image"; exit 1; }
    if exists "$name" "$image:latest"; then
        log "$image:latest exists"
        continue
    fi
    ctx="$(context_of "$dir" "harness-$name")"
    timed "$image:latest" as_user "$SANDBOX" image build "$ctx" --tag "$image:latest" \
        --build-arg "TOOLBOX_IMAGE=$TOOLBOX_IMAGE" --no-intermediate >/dev/null
    log "$image:latest: $(as_user podman run --rm --pull=never --ulimit host --network none "$image:latest" cat /usr/share/handler/version)"
done

# 4. The network filter (egress proxy) image.
build_proxy() {
    [ -x "$bin_dir/handler-egress-proxy" ] || { log "$bin_dir/handler-egress-proxy is missing"; return 1; }
    # The runtime finds the static proxy beside itself (decision 0071).
    as_user "$SANDBOX" image build-proxy >/dev/null
}
if exists proxy "$PROXY_IMAGE"; then log "$PROXY_IMAGE exists"; else timed "$PROXY_IMAGE" build_proxy; fi
log "ready: $BASE_IMAGE, $TOOLBOX_IMAGE, $(for n in $HARNESSES; do sed -n 's/^image *= *"\(.*\)"/\1:latest /p' handler-harness/data/harnesses/$n/harness.toml; done)$PROXY_IMAGE"
