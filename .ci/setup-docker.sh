#!/usr/bin/env bash
# Prepares a Debian 12 machine for the Docker runtime's tests (handler-sandbox-docker, contract A)
# against a real ROOTLESS Docker daemon (decision 0080). Run as root after setup-podman.sh
# (.ci/test runs podman's, then this one, then the browser's: the test images are copied from
# podman's store); idempotent. It:
#   - installs docker.io (dockerd 20.10), rootlesskit, slirp4netns, uidmap, tini (docker-init)
#     without letting the package start a system dockerd, and stops one it finds running as root
#     (a rootful daemon must not be what the tests reach);
#   - starts a rootless dockerd for $HANDLER_TEST_USER (default handler-test):
#     dockerd-rootless.sh --data-root ~/.local/share/docker, its own XDG_RUNTIME_DIR
#     (~/.docker-run, so rootless podman's /run/user is left alone), the host's loopback
#     reachable from containers (10.0.2.2, as slirp4netns gives podman), its log in
#     ~/.docker-run/dockerd.log; waits for its socket;
#   - points the user's docker client at it (a `rootless` context, so no DOCKER_HOST is needed);
#   - imports localhost/handler-test-busybox:latest into it (`docker import`, no registry here).
set -euo pipefail

USER_NAME="${HANDLER_TEST_USER:-handler-test}"

if [ "$(id -u)" -ne 0 ]; then
    echo "setup-docker.sh: run me as root" >&2
    exit 1
fi

log() { echo "setup-docker: $*" >&2; }

# 1. Packages, with no service started by their install scripts.
PKGS=(docker.io rootlesskit slirp4netns uidmap tini busybox-static util-linux)
missing=()
for p in "${PKGS[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
    log "installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    own_policy=0
    if [ ! -e /usr/sbin/policy-rc.d ]; then
        printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
        chmod +x /usr/sbin/policy-rc.d
        own_policy=1
    fi
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}"
    [ "$own_policy" = 1 ] && rm -f /usr/sbin/policy-rc.d
fi

# 2. No rootful daemon: a system dockerd (the package's, or one started by hand) is stopped.
if command -v systemctl >/dev/null 2>&1 && [ -d /run/systemd/system ]; then
    systemctl disable --now docker.service docker.socket >/dev/null 2>&1 || true
fi
if [ -f /run/docker.pid ]; then
    pid="$(cat /run/docker.pid)"
    if [ -n "$pid" ] && [ "$(stat -c %u "/proc/$pid" 2>/dev/null || echo none)" = 0 ]; then
        log "stopping the rootful dockerd (pid $pid)"
        kill "$pid" || true
        for _ in $(seq 1 50); do [ -e "/proc/$pid" ] || break; sleep 0.2; done
    fi
fi

# 3. The test user (setup-podman.sh made it, with subordinate ids; rootless Docker needs the same).
if ! id -u "$USER_NAME" >/dev/null 2>&1; then
    log "no user $USER_NAME: run .ci/setup-podman.sh first"
    exit 1
fi
USER_HOME="$(getent passwd "$USER_NAME" | cut -d: -f6)"
RUN_DIR="$USER_HOME/.docker-run"
SOCK="$RUN_DIR/docker.sock"
as_user() {
    setpriv --reuid="$USER_NAME" --regid="$USER_NAME" --init-groups \
        env -i HOME="$USER_HOME" USER="$USER_NAME" LOGNAME="$USER_NAME" \
        PATH=/usr/share/docker.io/contrib:/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin "$@"
}
docker_as_user() { as_user env DOCKER_HOST="unix://$SOCK" docker "$@"; }

# 4. Its rootless dockerd, unless one already answers.
if ! docker_as_user info >/dev/null 2>&1; then
    log "starting a rootless dockerd for $USER_NAME"
    as_user mkdir -p "$RUN_DIR" "$USER_HOME/.local/share/docker"
    chmod 700 "$RUN_DIR"
    rm -f "$SOCK"
    # The package's dockerd-rootless.sh always passes --disable-host-loopback to rootlesskit;
    # its flags are repeated here without that one (the host's loopback is 10.0.2.2 in the
    # daemon's namespace, as slirp4netns gives podman), and the script runs as rootlesskit's
    # child (_DOCKERD_ROOTLESS_CHILD=1), which starts dockerd. A registry on the host's
    # loopback (the machine pull test's, plain HTTP) is declared insecure as 10.0.2.2, where
    # this namespace sees it. setsid and closed descriptors:
    # the daemon outlives this script in a session of its own.
    as_user env XDG_RUNTIME_DIR="$RUN_DIR" _DOCKERD_ROOTLESS_CHILD=1 \
        setsid rootlesskit --net=slirp4netns --mtu=65520 \
        --slirp4netns-sandbox=auto --slirp4netns-seccomp=auto \
        --port-driver=builtin --copy-up=/etc --copy-up=/run --propagation=rslave \
        /usr/share/docker.io/contrib/dockerd-rootless.sh \
        --data-root "$USER_HOME/.local/share/docker" \
        --insecure-registry 10.0.2.2/32 \
        </dev/null >"$RUN_DIR/dockerd.log" 2>&1 &
    for _ in $(seq 1 150); do
        docker_as_user info >/dev/null 2>&1 && break
        sleep 0.2
    done
    if ! docker_as_user info >/dev/null 2>&1; then
        log "the rootless dockerd did not answer on $SOCK; its log:"
        tail -n 30 "$RUN_DIR/dockerd.log" >&2 || true
        exit 1
    fi
fi
if ! docker_as_user info --format '{{.SecurityOptions}}' | grep -q rootless; then
    log "the daemon on $SOCK is not rootless"
    exit 1
fi

# 5. The user's docker client reaches it without DOCKER_HOST: a `rootless` context in use.
if ! as_user docker context inspect rootless >/dev/null 2>&1; then
    as_user docker context create rootless --docker "host=unix://$SOCK" >/dev/null
fi
as_user docker context use rootless >/dev/null

# 6. The test images, copied from the user's podman store, which setup-podman.sh filled: busybox,
#    busybox with the host's git (the git guard's and sessionTree's Docker tests), and busybox
#    with the host's node and patchelf (the parts' toolbox, decision 0164; none without node).
for image in handler-test-busybox handler-test-git handler-test-node; do
    ref="localhost/$image:latest"
    as_user docker image inspect "$ref" >/dev/null 2>&1 && continue
    if as_user podman image exists "$ref"; then
        log "copying $ref from podman"
        as_user podman save "$ref" | as_user docker load >/dev/null
    elif [ "$image" != handler-test-node ]; then
        log "no $ref in podman yet: run setup-podman.sh, then me again"
        exit 1
    fi
done

# 7. A quick proof: a strict container runs as the host user (container uid 0 in the daemon's
#    user namespace) and a file it writes to a bind mount is the host user's.
probe="$(mktemp -d)"
chown "$USER_NAME:" "$probe"
as_user docker run --rm --pull=never --network none --read-only --cap-drop all \
    --security-opt no-new-privileges --init --mount "type=bind,source=$probe,destination=/p" \
    localhost/handler-test-busybox:latest touch /p/owned
owner="$(stat -c %U "$probe/owned")"
rm -rf "$probe"
if [ "$owner" != "$USER_NAME" ]; then
    log "a file written by a rootless container is owned by $owner, not $USER_NAME"
    exit 1
fi
log "ready: rootless dockerd for $USER_NAME on $SOCK, image localhost/handler-test-busybox:latest"
