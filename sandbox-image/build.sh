#!/usr/bin/env bash
# Builds tollgate's Docker sandbox image WITHOUT a registry and `docker import`s it.
#
#   sandbox-image/build.sh [--minimal | --dev] [--tag TAG] [--mirror URL] [--keep] [--if-missing]
#
# --minimal   busybox-static rootfs (the host's /bin/busybox + applet links); seconds.
#             The tests use this one. Tag: tollgate-sandbox:<version>-minimal
# (default)   debootstrap rootfs (Debian bookworm, minbase + bash coreutils git grep
#             findutils python3 ca-certificates) from the apt mirror this host is
#             configured with; minutes. Tag: tollgate-sandbox:<version>
# --dev       the default rootfs plus a development environment from Debian packages
#             (the rootfs is the engine's tollgate-sandbox:<version> when it has it, else
#             debootstrapped):
#             gcc, g++, make (build-essential), pkg-config, git, curl, python3 with
#             pip and venv, node and npm, openssh-client and netcat-openbsd (git over
#             ssh through the wall), jq, ripgrep; every setuid and
#             setgid bit removed, su/sudo/pkexec absent (checked). Tag:
#             tollgate-sandbox:<version>-dev
# --tag TAG   import under TAG instead of the default tag above.
# --mirror U  Debian mirror for debootstrap (default: read from /etc/apt/sources.list*).
# --keep      keep the rootfs directory (printed at the end) instead of deleting it.
# --if-missing  do nothing when the engine already has an image under the tag.
#
# <version> is the workspace version in the top-level Cargo.toml, which is the tag the
# docker backend asks for by default (tollgate_sandbox::docker::default_image()).
# Needs: root (debootstrap, and a rootfs owned by root), docker CLI, tar.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo_root="$(cd "$here/.." && pwd)"

die() { echo "build.sh: $*" >&2; exit 1; }
log() { echo "build.sh: $*" >&2; }

minimal=0
dev=0
tag=""
mirror=""
keep=0
if_missing=0
while [ $# -gt 0 ]; do
    case "$1" in
        --minimal) minimal=1 ;;
        --dev) dev=1 ;;
        --tag) [ $# -ge 2 ] || die "--tag needs a value"; tag="$2"; shift ;;
        --tag=*) tag="${1#--tag=}" ;;
        --mirror) [ $# -ge 2 ] || die "--mirror needs a value"; mirror="$2"; shift ;;
        --mirror=*) mirror="${1#--mirror=}" ;;
        --keep) keep=1 ;;
        --if-missing) if_missing=1 ;;
        -h|--help) sed -n '2,24p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) die "unknown argument: $1 (see --help)" ;;
    esac
    shift
done

# The version: [workspace.package] version = "X" in the top-level Cargo.toml.
version="$(awk '
    /^\[workspace\.package\]/ { in_pkg = 1; next }
    /^\[/ { in_pkg = 0 }
    in_pkg && /^version[[:space:]]*=/ { gsub(/.*=[[:space:]]*"|".*/, ""); print; exit }
' "$repo_root/Cargo.toml")"
[ -n "$version" ] || die "cannot read [workspace.package] version from $repo_root/Cargo.toml"

[ "$minimal" = 1 ] && [ "$dev" = 1 ] && die "--minimal and --dev are two different images; pick one"
flavor=full
[ "$minimal" = 1 ] && flavor=minimal
[ "$dev" = 1 ] && flavor=dev
if [ -z "$tag" ]; then
    case "$flavor" in
        minimal) tag="tollgate-sandbox:${version}-minimal" ;;
        dev) tag="tollgate-sandbox:${version}-dev" ;;
        *) tag="tollgate-sandbox:${version}" ;;
    esac
fi

command -v docker >/dev/null || die "docker CLI not found (install docker.io)"
if [ "$if_missing" = 1 ] && docker image inspect "$tag" >/dev/null 2>&1; then
    log "$tag is already built"
    echo "$tag"
    exit 0
fi
docker info >/dev/null 2>&1 || die "the docker engine is not reachable; start it (systemctl start docker)"
[ "$(id -u)" = 0 ] || die "run as root (the rootfs must be owned by root; debootstrap needs root)"

work="$(mktemp -d "${TMPDIR:-/tmp}/tollgate-sandbox-image.XXXXXX")"
rootfs="$work/rootfs"
cleanup() {
    if [ "$keep" = 1 ]; then log "kept rootfs at $rootfs"; else rm -rf "$work"; fi
}
trap cleanup EXIT
mkdir -p "$rootfs"
start=$(date +%s)

build_minimal() {
    local bb
    bb="$(command -v busybox || true)"
    [ -n "$bb" ] || die "busybox not found; install busybox-static"
    # Must be static: the rootfs has no libc.
    if ldd "$bb" >/dev/null 2>&1; then
        die "$bb is dynamically linked; install busybox-static"
    fi
    install -d -m 0755 "$rootfs"/{bin,sbin,usr/bin,usr/sbin,etc,proc,sys,dev,root,home}
    install -d -m 1777 "$rootfs/tmp"
    install -m 0755 "$bb" "$rootfs/bin/busybox"
    local applet
    while IFS= read -r applet; do
        [ -n "$applet" ] || continue
        [ "$applet" = "bin/busybox" ] && continue
        install -d -m 0755 "$rootfs/$(dirname "$applet")"
        ln -sf /bin/busybox "$rootfs/$applet"
    done < <("$rootfs/bin/busybox" --list-full)
    [ -e "$rootfs/bin/sh" ] || die "busybox has no sh applet"
    cat > "$rootfs/etc/passwd" <<'EOF'
root:x:0:0:root:/root:/bin/sh
nobody:x:65534:65534:nobody:/nonexistent:/bin/false
EOF
    cat > "$rootfs/etc/group" <<'EOF'
root:x:0:
nogroup:x:65534:
EOF
    chmod 0644 "$rootfs/etc/passwd" "$rootfs/etc/group"
}

# The first Debian mirror in this host's apt configuration (deb822 or one-line form).
configured_mirror() {
    local f
    for f in /etc/apt/sources.list.d/*.sources; do
        [ -f "$f" ] || continue
        awk '
            /^[[:space:]]*$/ { if (uri != "" && suites ~ /(^| )bookworm( |$)/) { print uri; exit } uri = ""; suites = ""; next }
            /^URIs:/ { uri = $2 }
            /^Suites:/ { $1 = ""; suites = $0 " " }
            END { if (uri != "" && suites ~ /(^| )bookworm( |$)/) print uri }
        ' "$f"
    done
    for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
        [ -f "$f" ] || continue
        awk '$1 == "deb" && $0 ~ / bookworm / { for (i = 2; i <= NF; i++) if ($i !~ /^\[/ && $i ~ /:\/\//) { print $i; exit } }' "$f"
    done
}

build_full() {
    command -v debootstrap >/dev/null || die "debootstrap not found; apt-get install debootstrap"
    if [ -z "$mirror" ]; then
        mirror="$(configured_mirror | grep -v -- '-security' | head -n 1 || true)"
    fi
    [ -n "$mirror" ] || die "no Debian bookworm mirror found in /etc/apt/sources.list*; pass --mirror URL"
    log "debootstrap bookworm from $mirror (takes minutes)"
    debootstrap --variant=minbase \
        --include=bash,coreutils,git,grep,findutils,python3,ca-certificates \
        bookworm "$rootfs" "$mirror" >"$work/debootstrap.log" 2>&1 \
        || { tail -n 30 "$work/debootstrap.log" >&2; die "debootstrap failed (log above)"; }
    # Nothing of the build host's apt state or caches goes into the image.
    rm -rf "$rootfs"/var/cache/apt/* "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/log/* \
        "$rootfs"/debootstrap "$rootfs"/var/cache/debconf/*-old
    install -d -m 1777 "$rootfs/tmp"
}

# The development packages, installed into the full rootfs by its own apt
# (dependencies resolved, no recommends), from the same mirror.
dev_packages=(build-essential pkg-config git curl ca-certificates python3 python3-pip
    python3-venv nodejs npm openssh-client netcat-openbsd jq ripgrep make)

# The full image's root filesystem back from the engine (docker export of a
# container made from it, never started), when the engine has it: the dev
# image is the full one plus packages, so it need not debootstrap again.
# Returns 1 when the engine has no full image of this version.
rootfs_from_full_image() {
    local full="tollgate-sandbox:${version}" cid
    [ "$(docker image inspect -f '{{index .Config.Labels "tollgate.sandbox-image"}}' "$full" 2>/dev/null)" = full ] \
        || return 1
    log "starting from the engine's $full (no debootstrap)"
    cid="$(docker create --network none "$full")" || die "docker create $full failed"
    if ! docker export "$cid" | tar -C "$rootfs" --numeric-owner -xpf -; then
        docker rm -f "$cid" >/dev/null 2>&1 || true
        die "exporting $full failed"
    fi
    docker rm -f "$cid" >/dev/null
    # What the engine adds to every container's filesystem.
    rm -f "$rootfs/.dockerenv"
    : > "$rootfs/etc/hostname"
    : > "$rootfs/etc/hosts"
    install -d -m 1777 "$rootfs/tmp"
}

build_dev() {
    rootfs_from_full_image || build_full
    cp /etc/resolv.conf "$rootfs/etc/resolv.conf"
    mount -t proc proc "$rootfs/proc"
    log "installing the development packages (takes minutes)"
    if ! chroot "$rootfs" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin \
        DEBIAN_FRONTEND=noninteractive sh -c \
        'apt-get update -q && apt-get install -y -q --no-install-recommends "$@"' sh \
        "${dev_packages[@]}" >"$work/apt.log" 2>&1; then
        umount "$rootfs/proc"
        tail -n 30 "$work/apt.log" >&2
        die "installing the development packages failed (log above)"
    fi
    umount "$rootfs/proc"
    : > "$rootfs/etc/resolv.conf"
    rm -rf "$rootfs"/var/cache/apt/* "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/log/* \
        "$rootfs"/var/cache/debconf/*-old
    # No way to gain root inside: no setuid or setgid file, and none of the
    # programs that exist only to switch users.
    find "$rootfs" -xdev -type f -perm /6000 -exec chmod ug-s {} +
    rm -f "$rootfs"/usr/bin/sudo "$rootfs"/usr/bin/pkexec "$rootfs"/bin/su "$rootfs"/usr/bin/su
    local left
    left="$(find "$rootfs" -xdev -type f -perm /6000 | head -n 5)"
    [ -z "$left" ] || die "setuid or setgid files left in the dev rootfs: $left"
    local tool
    for tool in cc c++ make pkg-config git curl python3 pip3 node npm ssh jq rg; do
        [ -x "$rootfs/usr/bin/$tool" ] || die "the dev rootfs has no /usr/bin/$tool"
    done
    chroot "$rootfs" /usr/bin/python3 -m venv --help >/dev/null \
        || die "python3 -m venv does not work in the dev rootfs"
}

case "$flavor" in
    minimal) build_minimal ;;
    dev) build_dev ;;
    *) build_full ;;
esac

cat > "$rootfs/etc/tollgate-sandbox" <<EOF
flavor=$flavor
version=$version
EOF
chmod 0644 "$rootfs/etc/tollgate-sandbox"

log "importing $flavor rootfs as $tag"
# The minimal image is reproducible (fixed mtimes); the full one keeps its mtimes
# because python's .pyc caches are checked against the sources' mtimes.
tar_opts=(--numeric-owner --sort=name)
[ "$minimal" = 1 ] && tar_opts+=(--mtime=@0)
tar "${tar_opts[@]}" -C "$rootfs" -cf - . |
    docker import \
        --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
        --change 'CMD ["sleep", "2147483647"]' \
        --change "LABEL tollgate.sandbox-image=$flavor tollgate.version=$version" \
        --message "tollgate sandbox image ($flavor) $version" \
        - "$tag" >/dev/null

log "done: $tag ($flavor) in $(( $(date +%s) - start )) s"
echo "$tag"
