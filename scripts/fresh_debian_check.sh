#!/bin/sh
# The README's two commands on a fresh machine, as a new user would run them (issue 26). Slow
# (~8 min on 2 cores) and needs root, debootstrap, podman and runc, so it is not part of CI.
#
# 1. Makes a Debian 12 root with only Node.js, npm, git and CA certificates (debootstrap
#    minbase), imports it into podman.
# 2. As root in a privileged container: clones this repository's committed HEAD and runs
#    `npx -y deno@2.9.6 task demo` and `… task test`. Passes when the demo shows pods answering
#    and the tests report 0 failed and nothing ignored.
# 3. In a second fresh container, as a user without root: the same two commands. Passes when the
#    demo ends saying it sent no packets and the tests end saying how many data-plane tests they
#    skipped, with a non-zero status.
#
# usage: sh scripts/fresh_debian_check.sh [WORKDIR]   (default: a new directory under /tmp)
# Logs: WORKDIR/root.log, WORKDIR/user.log. Removes the podman images it made; keeps WORKDIR.
set -eu

repo=$(cd "$(dirname "$0")/.." && pwd)
work=${1:-$(mktemp -d /tmp/knp-fresh-XXXXXX)}
image=localhost/knp-fresh-debian:$$
[ "$(id -u)" = 0 ] || {
  echo "run as root (debootstrap and privileged podman)" >&2
  exit 2
}
for tool in debootstrap podman runc; do
  command -v "$tool" >/dev/null || {
    echo "missing $tool: apt-get install -y debootstrap podman runc" >&2
    exit 2
  }
done
mkdir -p "$work"
echo "workdir $work"

# podman's default runtime (crun) fails on these machines' cgroups; runc works, and both ulimits
# are needed (see issue 19).
run() {
  podman --runtime runc run --rm --privileged --network host \
    --ulimit nofile=1024:1024 --ulimit nproc=1024:1024 \
    --env NODE_EXTRA_CA_CERTS=/etc/ssl/certs/ca-certificates.crt \
    --env SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt \
    -v "$work/clone:/src:ro" "$@"
}

echo "debootstrap: Debian 12 minbase + nodejs, npm, ca-certificates, git"
rm -rf "$work/root"
# debootstrap's resolver leaves some of npm's dependencies (virtual packages) out and reports a
# failure while configuring; `apt-get -f install` in the container completes the same package set.
debootstrap --variant=minbase --include=nodejs,npm,ca-certificates,git bookworm "$work/root" \
  >"$work/debootstrap.log" 2>&1 || echo "debootstrap reported errors (completed below)"
# CA certificates this machine trusts beyond Debian's (a TLS-inspecting proxy, say): without them
# no registry can be reached from inside the container, as on the host itself.
if ls /usr/local/share/ca-certificates/*.crt >/dev/null 2>&1; then
  cp /usr/local/share/ca-certificates/*.crt "$work/root/usr/local/share/ca-certificates/"
fi
tar -C "$work/root" -c . | podman import -q - "$image.base" >/dev/null
podman --runtime runc run --name "knp-fresh-$$" --network host \
  --ulimit nofile=1024:1024 --ulimit nproc=1024:1024 "$image.base" \
  sh -c 'DEBIAN_FRONTEND=noninteractive apt-get -f install -y -qq >/dev/null &&
    update-ca-certificates >/dev/null && dpkg --audit' >"$work/complete.log" 2>&1
podman commit -q "knp-fresh-$$" "$image" >/dev/null
podman rm -f "knp-fresh-$$" >/dev/null
podman rmi -f "$image.base" >/dev/null
rm -rf "$work/root" "$work/clone"
git clone -q "$repo" "$work/clone"
echo "testing $(git -C "$work/clone" log --oneline -1)"

commands='t0=$(date +%s); npx -y deno@2.9.6 task demo; echo "== demo exit $? after $(($(date +%s) - t0)) s"
t0=$(date +%s); npx -y deno@2.9.6 task test; echo "== test exit $? after $(($(date +%s) - t0)) s"'

echo "as root (log: $work/root.log) ..."
run "$image" sh -c "git clone -q /src /root/knp && cd /root/knp && $commands" >"$work/root.log" 2>&1 || true
echo "as a user without root (log: $work/user.log) ..."
run "$image" sh -c "useradd -m knp && git clone -q /src /home/knp/knp && chown -R knp: /home/knp/knp &&
  su knp -c 'cd ~/knp && $commands'" \
  >"$work/user.log" 2>&1 || true
podman rmi -f "$image" >/dev/null

# The verdict, from the logs.
plain() { sed 's/\x1b\[[0-9;]*m//g' "$1"; }
ok=true
check() { # check DESCRIPTION LOG EXTENDED-REGEX
  if plain "$2" | grep -Eq "$3"; then echo "ok    $1"; else
    echo "FAIL  $1"
    ok=false
  fi
}
echo "root: $(plain "$work/root.log" | grep -E '^== ' | tr '\n' ' ')"
plain "$work/root.log" | grep -E '^ +pod-[abc] +#+ [0-9]+$' || true
plain "$work/root.log" | grep -E '^(ok|FAILED) \| [0-9]+ passed' || true
echo "user: $(plain "$work/user.log" | grep -E '^== ' | tr '\n' ' ')"
plain "$work/user.log" | grep -E '^(missing [a-z ]+: |# demo:|[0-9]+ data-plane tests skipped)' || true
check "root: the demo prints pods answering and exits 0" "$work/root.log" '^== demo exit 0 '
check "root: every pod answered" "$work/root.log" '^ +pod-c +#+ [0-9]+$'
check "root: the tests pass with nothing ignored" "$work/root.log" '^ok \| [0-9]+ passed( \([0-9]+ steps?\))? \| 0 failed \('
check "root: the test task exits 0" "$work/root.log" '^== test exit 0 '
check "user: the demo says it sent no packets" "$work/user.log" '^# demo: sent no packets'
check "user: the tests say what they skipped" "$work/user.log" '^[0-9]+ data-plane tests skipped: '
check "user: the test task exits non-zero" "$work/user.log" '^== test exit [1-9]'
$ok
