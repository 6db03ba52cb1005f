#!/usr/bin/env bash
# Prepares a Debian 12 machine for the sandbox tests (contract A) against real rootless Podman.
# Run as root; idempotent. What it does:
#   - installs podman, runc, uidmap, slirp4netns, fuse-overlayfs, catatonit, busybox-static,
#     patchelf and docker-registry (a registry on loopback for the machine pull test);
#   - makes /dev/net/tun and /dev/fuse usable by unprivileged users (0666; created if missing);
#   - creates the unprivileged user $HANDLER_TEST_USER (default handler-test) with subuid/subgid
#     ranges, configures its podman to use runc (crun refuses cgroups in hybrid mode here);
#   - builds the local test images as that user (rootless image stores are per user):
#       localhost/handler-test-busybox:latest   a busybox-static root filesystem, imported;
#       localhost/handler-test-git:latest       the same with the host's git (the git guard's tests);
#       localhost/handler-test-node:latest      the same with the host's node and patchelf (a toolbox
#                                               Node's part is built from, decision 0164);
#       localhost/handler-test-nested:latest    the same with the host's podman, runc, conmon and
#                                               newuidmap/newgidmap with file capabilities: podman
#                                               run inside a nested sandbox (A.5, decision 0174).
set -euo pipefail

USER_NAME="${HANDLER_TEST_USER:-handler-test}"

if [ "$(id -u)" -ne 0 ]; then
    echo "setup-podman.sh: run me as root" >&2
    exit 1
fi

log() { echo "setup-podman: $*" >&2; }

# 1. Packages.
PKGS=(podman runc uidmap slirp4netns fuse-overlayfs catatonit busybox-static util-linux git debootstrap runsc patchelf docker-registry libcap2-bin)
missing=()
for p in "${PKGS[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
    log "installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# 1b. The Dev Container CLI (decision 0161) for the dev container tests, pinned in
# .ci/devcontainer-cli.txt; installed as root (the registry's TLS proxy is trusted there).
want="$(cat "$(dirname "$0")/devcontainer-cli.txt")"
if [ "$(devcontainer --version 2>/dev/null)" != "${want##*@}" ]; then
    command -v npm >/dev/null || { log "npm is missing (the machine's Node.js 20 and npm)"; exit 1; }
    log "installing $want"
    npm install -g --silent --no-audit --no-fund "$want"
fi

# 2. Devices: rootless networking (slirp4netns) needs /dev/net/tun, nested confinement /dev/fuse.
if [ ! -e /dev/net/tun ]; then
    mkdir -p /dev/net
    mknod /dev/net/tun c 10 200
fi
if [ ! -e /dev/fuse ]; then
    mknod /dev/fuse c 10 229
fi
chmod 666 /dev/net/tun /dev/fuse

# 3. The unprivileged test user, with subordinate ids.
if ! id -u "$USER_NAME" >/dev/null 2>&1; then
    log "creating user $USER_NAME"
    useradd -m -s /bin/bash "$USER_NAME"
fi
USER_UID="$(id -u "$USER_NAME")"
USER_HOME="$(getent passwd "$USER_NAME" | cut -d: -f6)"
# useradd gives ranges when /etc/login.defs says so; make sure they exist and do not overlap.
ensure_subids() {
    local file="$1"
    touch "$file"
    if ! grep -q "^${USER_NAME}:" "$file" && ! grep -q "^${USER_UID}:" "$file"; then
        # The next free range above every existing one.
        local start
        start="$(awk -F: 'BEGIN{m=100000} {e=$2+$3; if (e>m) m=e} END{print m}' "$file")"
        echo "${USER_NAME}:${start}:65536" >>"$file"
        log "added ${USER_NAME}:${start}:65536 to $file"
    fi
}
ensure_subids /etc/subuid
ensure_subids /etc/subgid

# 4. Its podman configuration: runc, cgroupfs (no systemd user session under runuser/setpriv).
as_user() {
    setpriv --reuid="$USER_NAME" --regid="$USER_NAME" --init-groups \
        env -i HOME="$USER_HOME" USER="$USER_NAME" LOGNAME="$USER_NAME" \
        PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin "$@"
}
as_user mkdir -p "$USER_HOME/.config/containers"
as_user sh -c "cat > '$USER_HOME/.config/containers/containers.conf'" <<'EOF'
# Written by .ci/setup-podman.sh: crun refuses cgroups in hybrid mode on these machines.
[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
EOF
# A storage configuration matching the machine (fuse-overlayfs works everywhere rootless).
as_user sh -c "cat > '$USER_HOME/.config/containers/storage.conf'" <<'EOF'
# Written by .ci/setup-podman.sh.
[storage]
driver = "overlay"

[storage.options.overlay]
mount_program = "/usr/bin/fuse-overlayfs"
EOF
# Pick up new subuid ranges in an already-running rootless podman.
as_user podman system migrate >/dev/null 2>&1 || true

# 5. Test images, built as the user.

# A busybox root filesystem in $1 with each program of the rest and the libraries it links.
busybox_with() {
    local root="$1" prog lib
    shift
    mkdir -p "$root/bin" "$root/etc" "$root/tmp" "$root/home" "$root/proc" "$root/sys" \
        "$root/dev" "$root/run" "$root/usr/lib"
    cp /bin/busybox "$root/bin/busybox"
    for applet in $(/bin/busybox --list); do
        [ "$applet" = busybox ] || ln -sf busybox "$root/bin/$applet"
    done
    ln -s ../bin "$root/usr/bin"
    ln -s bin "$root/sbin"
    for prog in "$@"; do
        cp "$prog" "$root/bin/$(basename "$prog")"
        for lib in $(ldd "$prog" | grep -o '/[^ ]*'); do
            mkdir -p "$root$(dirname "$lib")"
            cp -L "$lib" "$root$lib"
        done
    done
    echo "root:x:0:0:root:/root:/bin/sh" >"$root/etc/passwd"
    echo "root:x:0:" >"$root/etc/group"
}

# The root filesystem in folder $1 imported as image $2 (as the test user).
import_rootfs() {
    tar -C "$1" -cf "$1.tar" .
    chmod -R a+rX "$(dirname "$1")"
    as_user podman import \
        --change 'ENV PATH=/usr/local/bin:/usr/bin:/bin' \
        --change 'CMD ["/bin/sh"]' \
        "$1.tar" "$2" >/dev/null
}

if ! as_user podman image exists localhost/handler-test-busybox:latest; then
    log "building localhost/handler-test-busybox:latest"
    tmp="$(mktemp -d)"
    busybox_with "$tmp/rootfs"
    import_rootfs "$tmp/rootfs" localhost/handler-test-busybox:latest
    rm -rf "$tmp"
fi

# The busybox root filesystem with this host's git, its exec path and the libraries it links
# (the git guard's bring-back runs git in the sandbox's image, issue 14).
if ! as_user podman image exists localhost/handler-test-git:latest; then
    log "building localhost/handler-test-git:latest"
    tmp="$(mktemp -d)"
    busybox_with "$tmp/rootfs" /usr/bin/git
    cp -a /usr/lib/git-core "$tmp/rootfs/usr/lib/git-core"
    import_rootfs "$tmp/rootfs" localhost/handler-test-git:latest
    rm -rf "$tmp"
fi

# The busybox root filesystem with this host's node and patchelf: the toolbox a part of Node is
# built from in the parts' tests (decision 0164). Without node on this machine, none: those
# cases then say why they skip.
node_bin="$(command -v node || true)"
if [ -n "$node_bin" ] && ! as_user podman image exists localhost/handler-test-node:latest; then
    log "building localhost/handler-test-node:latest"
    tmp="$(mktemp -d)"
    busybox_with "$tmp/rootfs" "$(readlink -f "$node_bin")" /usr/bin/patchelf
    import_rootfs "$tmp/rootfs" localhost/handler-test-node:latest
    rm -rf "$tmp"
fi

# The busybox root filesystem with this host's podman (A.5 nested: `podman run` inside a nested
# sandbox). As the default toolbox has them: newuidmap/newgidmap with file capabilities (a setuid
# bit does nothing on the sandbox's fuse-overlayfs root), kept through the archive as xattrs;
# inner containers share the sandbox's network namespace (its policy: loopback only, or its
# proxy's forwarder) and UTS namespace (the sandbox's seccomp profile refuses sethostname).
# This host's runc, cgroupfs and vfs storage: no systemd, no fuse mount inside.
if ! as_user podman image exists localhost/handler-test-nested:latest; then
    log "building localhost/handler-test-nested:latest"
    tmp="$(mktemp -d)"
    busybox_with "$tmp/rootfs" "$(command -v podman)" "$(command -v runc)" "$(command -v conmon)" \
        /usr/bin/newuidmap /usr/bin/newgidmap
    chmod 0755 "$tmp/rootfs/bin/newuidmap" "$tmp/rootfs/bin/newgidmap"
    setcap cap_setuid+ep "$tmp/rootfs/bin/newuidmap"
    setcap cap_setgid+ep "$tmp/rootfs/bin/newgidmap"
    mkdir -p "$tmp/rootfs/etc/containers" "$tmp/rootfs/var/tmp"
    chmod 1777 "$tmp/rootfs/tmp" "$tmp/rootfs/var/tmp"
    cp /etc/containers/policy.json "$tmp/rootfs/etc/containers/"
    printf '[storage]\ndriver = "vfs"\n' >"$tmp/rootfs/etc/containers/storage.conf"
    printf '[containers]\nnetns = "host"\nutsns = "host"\n[engine]\nruntime = "runc"\ncgroup_manager = "cgroupfs"\nevents_logger = "file"\n' \
        >"$tmp/rootfs/etc/containers/containers.conf"
    tar --xattrs --xattrs-include='security.capability' -C "$tmp/rootfs" -cf "$tmp/rootfs.tar" .
    chmod -R a+rX "$tmp"
    as_user podman import \
        --change 'ENV PATH=/usr/local/bin:/usr/bin:/bin' \
        --change 'CMD ["/bin/sh"]' \
        "$tmp/rootfs.tar" localhost/handler-test-nested:latest >/dev/null
    rm -rf "$tmp"
fi

# 6. A quick proof that a rootless keep-id container starts.
out="$(as_user podman run --rm --pull=never --userns=keep-id --network none --read-only \
    --cap-drop all --security-opt no-new-privileges localhost/handler-test-busybox:latest id -u)"
if [ "$out" != "$USER_UID" ]; then
    log "a rootless container did not run as uid $USER_UID (got: $out)"
    exit 1
fi
log "ready: user $USER_NAME (uid $USER_UID), image localhost/handler-test-busybox:latest"
