#!/usr/bin/env bash
# CI for the packaging (docs/OPERATIONS.md, "Running under systemd"), as
# root on the host:
#   1. systemd-analyze verify on the three units (ExecStart pointed at the
#      freshly built binary, since nothing is installed on the host; man
#      pages found in the generated ones);
#   2. systemd-analyze security --offline=true, printed (its score is
#      recorded in docs/OPERATIONS.md);
#   3. two .debs (this version and a higher one, for the upgrade);
#   4. packaging/deb-checks.sh in a throwaway container from the full
#      sandbox image (Debian bookworm with dpkg; no network): install, files,
#      modes, group, conffile, the supervisor to its ready line, upgrade,
#      purge, no stray files.
set -euo pipefail
cd "$(dirname "$0")/.."

image="${TOLLGATE_DEB_TEST_IMAGE:-tollgate-sandbox:0.1.0}"
target="${CARGO_TARGET_DIR:-$PWD/target}"
work="$(mktemp -d /tmp/tollgate-deb-test.XXXXXX)"
container="tollgate-deb-test-$$"
cleanup() {
    docker rm -f "$container" >/dev/null 2>&1 || true
    rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 143' TERM INT

first="$(packaging/build-deb.sh)"
mkdir -p "$work/debs/first" "$work/debs/second"
cp "$first" "$work/debs/first/"
version="$(dpkg-deb -f "$first" Version)"
# The second package only differs in its version. cargo deb removes the
# first from $target/debian even when told to write elsewhere: put it back,
# as the build's product.
DEB_FAST=1 DEB_OUT_DIR="$work/debs/second" DEB_VERSION="${version}+upgradetest1" \
    packaging/build-deb.sh >/dev/null
cp "$work/debs/first/$(basename "$first")" "$first"

echo "== systemd-analyze verify"
units="$work/units"
mkdir -p "$units"
for u in tollgate.service tollgate.socket tollgate-operator.socket; do
    sed "s|/usr/bin/supervisor|$target/release/supervisor|" "packaging/systemd/$u" >"$units/$u"
done
# A warning is a failure too (verify exits 0 on some of them).
verify_out="$(MANPATH="$target/release/deb-staging/man" \
    systemd-analyze verify "$units/tollgate.service" "$units/tollgate.socket" "$units/tollgate-operator.socket" 2>&1)" || {
    echo "$verify_out" >&2
    exit 1
}
if [ -n "$verify_out" ]; then
    echo "$verify_out" >&2
    echo "test-deb: systemd-analyze verify warned about the units" >&2
    exit 1
fi
echo "verify: ok"

echo "== systemd-analyze security --offline=true"
# The exposures it still counts (each is explained in docs/OPERATIONS.md), then the score.
systemd-analyze security --offline=true --no-pager "$units/tollgate.service" | grep -v '^✓'

echo "== install, run, upgrade and purge in a throwaway $image container"
cp packaging/deb-checks.sh "$work/debs/"
timeout 300 docker run --rm --name "$container" --network none \
    -v "$work/debs:/debs:ro" "$image" /bin/sh /debs/deb-checks.sh
