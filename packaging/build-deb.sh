#!/usr/bin/env bash
# Builds the tollgate .deb: the three binaries (release) and the Docker
# backend's static exec agent (built with them by supervisor/sandbox/build.rs,
# installed beside supervisor where the backend looks for it), their man pages and
# shell completions (generated from the clap definitions by each binary's
# hidden `__generate-docs DIR`), the packaged config (the workstation
# example with `operator_group = "tollgate"`), then `cargo deb --no-build`.
# Prints the path of the .deb on its last line.
#
# Environment: CARGO_TARGET_DIR (default ./target); DEB_VERSION to stamp
# another version (the upgrade test builds a second one); DEB_FAST=1 for
# lighter compression; DEB_OUT_DIR to write it elsewhere than
# $CARGO_TARGET_DIR/debian (cargo deb still removes an older package from
# there).
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v cargo-deb >/dev/null 2>&1; then
    echo "build-deb: cargo-deb is missing; cargo install cargo-deb --locked" >&2
    exit 1
fi
target="${CARGO_TARGET_DIR:-$PWD/target}"
cargo build --release --locked --bin supervisor --bin supervisorctl --bin agent >&2

staging="$target/release/deb-staging"
rm -rf "$staging"
mkdir -p "$staging"
for b in supervisor supervisorctl agent; do
    "$target/release/$b" __generate-docs "$staging" >/dev/null
done
gzip -9n "$staging"/man/man*/*

# One copy of the config: the shipped workstation example, with operators in
# the tollgate group the package creates.
sed '/^\[supervisor\]$/a operator_group = "tollgate"   # members may use operator.sock and read the audit log' \
    examples/workstation.toml >"$staging/supervisor.toml"
grep -q '^operator_group = "tollgate"' "$staging/supervisor.toml"

out="${DEB_OUT_DIR:-$target/debian}"
mkdir -p "$out"
# Stripped, as Debian ships binaries (the release profile keeps line tables,
# which would triple the package). DEB_FAST=1: lighter compression, for the
# throwaway packages of the upgrade test.
args=(-p tollgate-supervisor --no-build --locked --strip -o "$out")
if [ -n "${DEB_FAST:-}" ]; then
    args+=(--fast)
fi
if [ -n "${DEB_VERSION:-}" ]; then
    args+=(--deb-version "$DEB_VERSION")
fi
# cargo deb prints the path of the package it wrote as its last line.
cargo deb "${args[@]}" | tail -1
