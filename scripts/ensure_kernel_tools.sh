#!/bin/sh
# Makes sure of the programs that `deno task demo` and the data-plane tests run in network
# namespaces: nft (nftables), iptables, conntrack, ip (iproute2), sysctl (procps), curl (one
# test reads the proxy's metrics inside a namespace) and ipset (the ipvs-mode switch-over tests
# build and then expect removed the KUBE-* ipsets an ipvs-mode kube-proxy leaves). Run before `deno task demo` and
# `deno task test` (and so by `.ci/run`); the only copy of this check.
#
# - Nothing missing: prints nothing.
# - Missing, root, apt-get present (Debian, Ubuntu): installs the missing packages, with one line
#   saying which and why.
# - Otherwise (not root, no apt-get, install failed, no network): says what is missing and what the
#   caller gets instead, and exits 0 so the task goes on without the kernel parts. Under CI=true,
#   where the data-plane tests are required, it exits 1 instead.
#
# usage: sh scripts/ensure_kernel_tools.sh demo|test
set -u

case "${1:-}" in
demo) instead="the demo prints the nft script it would apply instead of sending packets" ;;
test) instead="the data-plane tests are skipped and \`deno task test\` fails (\`deno task test:unit\` runs the other tests on purpose)" ;;
*)
  echo "usage: sh $0 demo|test" >&2
  exit 2
  ;;
esac

if [ "$(uname -s)" != Linux ]; then
  echo "not Linux: network namespaces need Linux, so $instead."
  exit 0
fi

# A user's PATH often lacks the sbin directories where these tools live; look there too.
has_tool() {
  (
    PATH="$PATH:/usr/local/sbin:/usr/sbin:/sbin"
    command -v "$1" >/dev/null 2>&1
  )
}

tools=""
packages=""
for pair in nft:nftables iptables:iptables conntrack:conntrack ip:iproute2 sysctl:procps curl:curl ipset:ipset prometheus:prometheus; do
  if ! has_tool "${pair%%:*}"; then
    tools="$tools ${pair%%:*}"
    packages="$packages ${pair#*:}"
  fi
done
[ -z "$packages" ] && exit 0

why="the demo and the data-plane tests run nft, iptables, conntrack, ip, sysctl, curl and ipset in network namespaces"
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "installing$packages with apt-get (missing$tools): $why"
  log=$(mktemp)
  export DEBIAN_FRONTEND=noninteractive
  # shellcheck disable=SC2086 # one word per package
  if apt-get update -qq >"$log" 2>&1 &&
    apt-get install -y -qq --no-install-recommends $packages >>"$log" 2>&1; then
    rm -f "$log"
    exit 0
  fi
  detail=$(grep -E '^(E|W|Err):' "$log" | head -n 1)
  problem="apt-get could not install them (${detail:-$(tail -n 1 "$log")})"
  rm -f "$log"
elif [ "$(id -u)" != 0 ]; then
  problem="not root, so not installing them (as root: apt-get install -y$packages)"
else
  problem="no apt-get here: install$packages with this system's package manager"
fi
echo "missing$tools: $problem. Without them $instead."
[ "${CI:-}" = true ] && exit 1
exit 0
