#!/usr/bin/env bash
# Builds, once, a minimal Debian 13 (trixie) root holding its nftables (nft 1.1.3), for
# tests/compat/nft-1.1.3 to run; prints the root's path. A root already built is reused as it
# is (delete the directory to rebuild it).
#
#   tests/compat/debian13_root.sh            # → /var/cache/knp/trixie-nft
#
# Environment: KNP_DEBIAN13_ROOT (where the root goes; default /var/cache/knp/trixie-nft),
# KNP_DEBIAN_MIRROR (default http://deb.debian.org/debian).
# Exit status: 0 built or reused, 3 the Debian archive cannot be reached (one line on stderr
# says so), anything else a failure. Needs root; installs debootstrap if it is missing.
#
# The root is `debootstrap --variant=minbase --include=nftables`: it has no /etc/protocols
# (package netbase), so its nft prints protocols as numbers (`6` for `tcp`) — the stricter
# case for the proxy's readback, and what Debian 13's nft prints on any machine without that
# file.
set -euo pipefail
root="${KNP_DEBIAN13_ROOT:-/var/cache/knp/trixie-nft}"
mirror="${KNP_DEBIAN_MIRROR:-http://deb.debian.org/debian}"

if [ -x "$root/usr/sbin/nft" ]; then
  echo "$root"
  exit 0
fi
if ! wget -q -O /dev/null --timeout=15 --tries=2 "$mirror/dists/trixie/InRelease"; then
  echo "the Debian archive ($mirror) cannot be reached: no Debian 13 root" >&2
  exit 3
fi
if ! command -v debootstrap >/dev/null 2>&1; then
  export DEBIAN_FRONTEND=noninteractive
  { apt-get update -qq && apt-get install -y -qq debootstrap; } >/dev/null
fi
# Built beside its final place and renamed when complete: an interrupted build leaves no root
# that the check above would take for a finished one.
mkdir -p "$(dirname "$root")"
partial="$root.partial.$$"
trap 'rm -rf "$partial"' EXIT
log="$(mktemp)"
if ! debootstrap --variant=minbase --include=nftables trixie "$partial" "$mirror" >"$log" 2>&1; then
  tail -n 20 "$log" >&2
  rm -f "$log"
  echo "debootstrap of Debian 13 failed" >&2
  exit 1
fi
rm -f "$log"
# Only the nft of this root is used; drop apt's downloaded packages.
rm -rf "$partial/var/cache/apt/archives/"*.deb
mv -T "$partial" "$root" 2>/dev/null || rm -rf "$partial" # another build finished first
echo "$root"
