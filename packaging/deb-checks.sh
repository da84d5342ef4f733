#!/bin/sh
# Runs inside a throwaway root (a container from the sandbox image: Debian
# bookworm with dpkg) with the packages in /debs: install, check files,
# modes, the group and the conffile, run the supervisor from the package to
# its ready line, upgrade (a local edit of the conffile survives), purge,
# and compare the file list with the one from before the install.
set -eu

fail() {
    echo "deb-checks: FAIL: $*" >&2
    exit 1
}
say() { echo "deb-checks: $*"; }

snapshot() {
    find / -xdev \( -path /proc -o -path /sys -o -path /dev -o -path /tmp \
        -o -path /run -o -path /debs -o -path /var/lib/dpkg -o -path /var/cache \
        -o -path /var/log/dpkg.log -o -path /var/log/apt -o -path /var/log/alternatives.log \
        -o -path /etc/group- -o -path /etc/gshadow- -o -path /etc/passwd- -o -path /etc/shadow- \) \
        -prune -o -print | sort
}

# mode owner group path
expect() {
    got="$(stat -c '%a %U %G' "$4" 2>/dev/null)" || fail "$4 is missing"
    [ "$got" = "$1 $2 $3" ] || fail "$4 is '$got', expected '$1 $2 $3'"
}

# Scratch files: a fresh mktemp directory, never a fixed name in /tmp that
# another user could plant (docs/THREAT_MODEL.md, "Names in world-writable
# directories").
scratch="$(mktemp -d /tmp/deb-checks.XXXXXX)" || fail "mktemp -d failed"
trap 'rm -rf "$scratch"' EXIT

first="$(ls /debs/first/*.deb)"
second="$(ls /debs/second/*.deb)"
snapshot >"$scratch/before"

say "install $(basename "$first")"
dpkg -i "$first"
getent group tollgate >/dev/null || fail "no tollgate group after install"
for b in supervisor supervisorctl agent tollgate-exec-agent; do
    expect 755 root root "/usr/bin/$b"
done
# The bench is a developer's tool (docs/PERFORMANCE.md): not in the package.
if dpkg -L tollgate | grep -q 'tollgate-bench'; then fail "the package ships the bench: $(dpkg -L tollgate | grep tollgate-bench)"; fi
for u in tollgate.service tollgate.socket tollgate-operator.socket; do
    expect 644 root root "/lib/systemd/system/$u"
done
expect 644 root root /etc/tollgate/supervisor.toml
expect 750 root tollgate /var/log/tollgate
dpkg-query -W -f='${Conffiles}\n' tollgate | grep -q '/etc/tollgate/supervisor.toml' ||
    fail "/etc/tollgate/supervisor.toml is not a conffile"
grep -q '^operator_group = "tollgate"' /etc/tollgate/supervisor.toml ||
    fail "the packaged config does not name the tollgate group"
for page in man5/tollgate.toml.5.gz man8/supervisor.8.gz man8/supervisorctl.8.gz man8/supervisorctl-audit-verify.8.gz man1/agent.1.gz; do
    expect 644 root root "/usr/share/man/$page"
    zcat "/usr/share/man/$page" | grep -q '^\.TH' || fail "$page is not a man page"
done
zcat /usr/share/man/man8/supervisor.8.gz | grep -q 'socket\\-activation' ||
    fail "supervisor(8) lacks --socket-activation"
for c in bash-completion/completions/supervisorctl zsh/vendor-completions/_supervisorctl \
    fish/vendor_completions.d/supervisorctl.fish bash-completion/completions/agent \
    bash-completion/completions/supervisor; do
    expect 644 root root "/usr/share/$c"
done
grep -q -- '--socket' /usr/share/bash-completion/completions/supervisorctl ||
    fail "bash completion lacks --socket"

say "run the packaged supervisor to its ready line"
supervisor --config /etc/tollgate/supervisor.toml 2>"$scratch/supervisor.log" &
pid=$!
i=0
until grep -q '^supervisor: ready ' "$scratch/supervisor.log"; do
    i=$((i + 1))
    if [ "$i" -gt 300 ] || ! kill -0 "$pid" 2>/dev/null; then
        cat "$scratch/supervisor.log" >&2
        fail "no ready line"
    fi
    sleep 0.1
done
grep '^supervisor: ready ' "$scratch/supervisor.log"
grep -q '^supervisor: ready agent=/run/tollgate/agent.sock operator=/run/tollgate/operator.sock sandbox=native$' "$scratch/supervisor.log" ||
    fail "unexpected ready line"
expect 666 root root /run/tollgate/agent.sock
expect 660 root tollgate /run/tollgate/operator.sock
supervisorctl status | grep -q '^telemetry: *off$' || fail "supervisorctl status"
kill -TERM "$pid"
wait "$pid" || fail "the supervisor did not exit 0 on SIGTERM"
log="$(ls /var/log/tollgate/ | grep '^supervisor-.*\.jsonl$' | head -1)"
[ -n "$log" ] || fail "no supervisor audit log (supervisor-<UTC>.jsonl) in /var/log/tollgate"
expect 640 root tollgate "/var/log/tollgate/$log"
expect 750 root tollgate /var/log/tollgate

say "upgrade to $(basename "$second"), keeping a local edit of the conffile"
echo '# local edit' >>/etc/tollgate/supervisor.toml
dpkg -i "$second"
tail -1 /etc/tollgate/supervisor.toml | grep -q '^# local edit$' || fail "the upgrade lost the local edit"
[ "$(dpkg-query -W -f='${Version}' tollgate)" != "$(dpkg-deb -f "$first" Version)" ] || fail "not upgraded"
expect 755 root root /usr/bin/supervisor
getent group tollgate >/dev/null || fail "the upgrade lost the group"

say "purge"
dpkg --purge tollgate
getent group tollgate >/dev/null && fail "the tollgate group is left after purge"
[ ! -e /run/tollgate ] || fail "/run/tollgate is left after purge"
snapshot >"$scratch/after"
if ! diff "$scratch/before" "$scratch/after"; then
    fail "install, upgrade and purge left the files above (> added, < removed)"
fi
say "ok: install, files, modes, group, conffile, ready line, upgrade, purge"
