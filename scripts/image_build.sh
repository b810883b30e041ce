#!/bin/sh
# The Dockerfile's build step: turns main.ts into what the image runs, in OUT, laid out as it is
# copied to /usr/local:
#
#   compile  OUT/bin/kube-nftproxy: one `deno compile`d binary (needs Deno's `denort`, from
#            Deno's servers or DENORT_BIN), the permissions below compiled in.
#   bundle   OUT/lib/kube-nftproxy/: Deno's binary, main.ts bundled into one file (`deno bundle`,
#            offline) and the cluster file parser's worker beside it; OUT/bin/kube-nftproxy: a
#            launcher that runs the bundle with the permissions below.
#
# usage: sh scripts/image_build.sh compile|bundle OUT      (run in the repository's root)
#        sh scripts/image_build.sh permissions           (prints the permission flags)
#
# The proxy's permissions, and nothing more (README, "Permissions", says why each one):
# - run:   the kernel tools it drives (nft, ip, conntrack, ipset, ipvsadm, and every iptables
#          program the iptables mode and the leftover cleanups may use);
# - net:   the API server (any address a kubeconfig may name) and its own listeners;
# - sys:   hostname (the node name when no --hostname-override) and networkInterfaces (the
#          node's addresses, for NodePorts);
# - env:   all: the `debug` npm package under the Kubernetes client lists every variable when it
#          loads, and a listed set would stop it;
# - read:  the config, kubeconfig, service account and cluster-file directories deploy/ mounts,
#          /tmp (the nft scripts it writes there) and the worker module;
# - write: /tmp;
# - ffi:   libc alone (its path in Debian's layout, the runtime image's), for netlink: full syncs
#          written as one batch, the rules check, the per-service counters, iptables-legacy's
#          table summaries. Without it each of those runs `nft` or `iptables` instead (at 10k
#          services: first sync 2.2 s instead of 1.4, a 263 MB child, a 400 ms scrape). libc can
#          make any system call the container allows, so with FFI the sandbox no longer holds a
#          compromised dependency to the lists above; the container (NET_ADMIN only, read-only
#          root) still does, as it does for upstream's kube-proxy. FFI=off leaves it out.
# No --allow-all, which Deno asks for before any access to /proc and /sys: the conntrack sysctls
# are then left as the node has them (one warning each) and the descriptor limit is taken as
# unknown (384 connections per listener).
set -eu

mode="${1:-}"
out="${2:-}"
app=/usr/local/lib/kube-nftproxy
worker=src/source/cluster_file_worker.ts
programs=nft,ip,conntrack,ipset,ipvsadm
for family in iptables ip6tables; do
  for backend in "" -nft -legacy; do
    for tool in "" -save -restore; do
      programs="$programs,$family$backend$tool"
    done
  done
done
PERMISSIONS="--allow-run=$programs --allow-net --allow-sys=hostname,networkInterfaces --allow-env \
--allow-read=/etc/kube-nftproxy,/var/lib/kube-proxy,/var/run/secrets/kubernetes.io,/run/secrets/kubernetes.io,/tmp,$app \
--allow-write=/tmp"
case "${FFI:-on}" in
on)
  libc="/lib/$(uname -m)-linux-gnu/libc.so.6"
  if [ ! -e "$libc" ]; then
    echo "image_build.sh: no libc at $libc (FFI=off builds without netlink)" >&2
    exit 1
  fi
  PERMISSIONS="$PERMISSIONS --allow-ffi=$libc"
  ;;
off) ;;
*)
  echo "image_build.sh: FFI must be on or off, not ${FFI}" >&2
  exit 2
  ;;
esac

case "$mode" in
permissions)
  echo "$PERMISSIONS"
  ;;
compile)
  # deno compile reads DENORT_BIN when it is set at all; an empty value must not reach it.
  if [ -z "${DENORT_BIN:-}" ]; then unset DENORT_BIN; fi
  mkdir -p "$out/bin"
  # shellcheck disable=SC2086 # one word per flag
  deno compile $PERMISSIONS --no-prompt --frozen --include "$worker" \
    --output "$out/bin/kube-nftproxy" main.ts
  "$out/bin/kube-nftproxy" --version
  ;;
bundle)
  mkdir -p "$out/bin" "$out/lib/kube-nftproxy"
  staging=$(mktemp -d)
  deno bundle --platform deno --frozen --minify --outdir "$staging" main.ts "$worker" >/dev/null
  cp "$staging/main.js" "$out/lib/kube-nftproxy/main.js"
  # main.js starts its worker as new URL("./cluster_file_worker.ts", import.meta.url): the
  # worker's bundle goes there under that name (plain JavaScript is valid TypeScript).
  cp "$staging/$(dirname "$worker")/cluster_file_worker.js" "$out/lib/kube-nftproxy/cluster_file_worker.ts"
  rm -rf "$staging"
  cp "$(command -v deno)" "$out/lib/kube-nftproxy/deno"
  # DENO_DIR in /tmp: Deno keeps its code cache there, the one writable place of the image.
  cat >"$out/bin/kube-nftproxy" <<EOF
#!/bin/sh
export DENO_DIR="\${DENO_DIR:-/tmp/deno}" DENO_NO_UPDATE_CHECK=1
exec $app/deno run --no-config --no-lock --no-prompt $PERMISSIONS $app/main.js "\$@"
EOF
  chmod 755 "$out/bin/kube-nftproxy"
  deno run --no-config --no-lock --no-prompt --allow-env "$out/lib/kube-nftproxy/main.js" --version
  ;;
*)
  echo "usage: sh $0 compile|bundle OUT | permissions" >&2
  exit 2
  ;;
esac
