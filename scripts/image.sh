#!/bin/sh
# `deno task image`: builds the container image localhost/kube-nftproxy:<version> from the
# repository's Dockerfile with podman (or docker where podman is missing), needing neither Deno's
# servers nor an image registry, and prints its size and the build's time.
#
# Without DENO_IMAGE and BASE_IMAGE it makes the two base images itself, once (kept in the
# image store; the Debian root is cached in /var/cache/knp/, delete it to rebuild):
# - localhost/knp-debian:bookworm: `debootstrap --variant=minbase bookworm` from Debian's
#   archive, without apt's lists, caches, documentation and locales, imported (`podman import`);
# - localhost/knp-deno:<deno version>: that root plus Deno's Linux binary, taken from npm's
#   package @deno/linux-x64-glibc (`npm pack`, from npm's cache when it holds it), or from
#   DENO_BIN, or from the `deno` on PATH when it is that version;
# and builds with BUILD=bundle, since `deno compile` needs `denort` from Deno's servers.
#
# Environment: IMAGE_TAG (default localhost/kube-nftproxy:<deno.json's version>), BUILD
# (compile|bundle; default bundle with the local bases, compile with yours), DENO_IMAGE and
# BASE_IMAGE (your bases, e.g. a registry mirror's denoland/deno:2.9.6 and debian:bookworm-slim),
# DENORT_BIN and FFI (on|off, passed on to the Dockerfile), KNP_DEBIAN_MIRROR (default
# http://deb.debian.org/debian), DENO_BIN.
#
# On a fresh Debian machine, as root, it installs what it lacks (podman and runc; debootstrap
# for the local bases) with apt-get, with one line saying so. Containers run with runc where it
# is installed: crun, podman's default, fails on some cgroup set-ups.
set -eu
cd "$(dirname "$0")/.."
started=$(date +%s)

say() { echo "image: $*" >&2; }
fail() {
  say "$*"
  exit 1
}

version=$(sed -nE 's/^  "version": "([^"]+)",?$/\1/p' deno.json)
deno_version=$(sed -nE 's/^ARG DENO_IMAGE=denoland\/deno:(.+)$/\1/p' Dockerfile)
[ -n "$version" ] && [ -n "$deno_version" ] || fail "cannot read the version from deno.json or Dockerfile"
tag="${IMAGE_TAG:-localhost/kube-nftproxy:$version}"
mirror="${KNP_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
local_bases=false
if [ -z "${DENO_IMAGE:-}" ] && [ -z "${BASE_IMAGE:-}" ]; then local_bases=true; fi

# --- tools ------------------------------------------------------------------------------------
install_packages() { # why package...
  why=$1
  shift
  if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
    fail "missing $*: install them ($why)"
  fi
  say "installing $* with apt-get: $why"
  log=$(mktemp)
  # With recommends: podman's (netavark, catatonit, …) are what a working podman is tested with.
  if ! { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@"; } \
    >"$log" 2>&1; then
    tail -n 5 "$log" >&2
    rm -f "$log"
    fail "apt-get could not install $*"
  fi
  rm -f "$log"
}

if command -v podman >/dev/null 2>&1; then
  engine=podman
elif command -v docker >/dev/null 2>&1; then
  engine=docker
else
  install_packages "the image is built and run with podman" podman runc
  engine=podman
fi
if [ "$engine" = podman ] && ! command -v runc >/dev/null 2>&1; then
  install_packages "podman's default runtime (crun) fails on some cgroup set-ups" runc
fi
# Builds share the machine's network (no bridge, so no firewall rules on the machine) to reach
# the npm registry and Debian's archive; RUN steps get the limits the runtimes need here.
set -- --network host --ulimit nofile=1024:1024 --ulimit nproc=1024:1024
[ "$engine" = podman ] && set -- "$@" --runtime runc

image_exists() {
  if [ "$engine" = podman ]; then podman image exists "$1"; else docker image inspect "$1" >/dev/null 2>&1; fi
}

# --- local bases ------------------------------------------------------------------------------
debian_root() { # prints the cached minbase root's path, building it once
  root=/var/cache/knp/bookworm-minbase
  if [ -x "$root/bin/sh" ]; then
    echo "$root"
    return
  fi
  [ "$(id -u)" = 0 ] || fail "the Debian base is made with debootstrap, which needs root: run \
this as root once, or set DENO_IMAGE and BASE_IMAGE to bases you have"
  command -v debootstrap >/dev/null 2>&1 ||
    install_packages "the local Debian base is made from Debian's archive" debootstrap
  mkdir -p "$(dirname "$root")"
  partial="$root.partial.$$"
  log=$(mktemp)
  say "making a Debian 12 minbase root from $mirror (about 30 s)"
  if ! debootstrap --variant=minbase bookworm "$partial" "$mirror" >"$log" 2>&1; then
    tail -n 20 "$log" >&2
    rm -rf "$partial" "$log"
    fail "debootstrap of Debian 12 failed (is $mirror reachable?)"
  fi
  rm -f "$log"
  # What an image does not need: apt's lists and downloads (the Dockerfile fetches fresh lists),
  # documentation, manual pages and translations.
  rm -rf "$partial"/var/cache/apt/* "$partial"/var/lib/apt/lists/* "$partial"/usr/share/doc \
    "$partial"/usr/share/man "$partial"/usr/share/info "$partial"/usr/share/locale \
    "$partial"/var/log/*.log "$partial"/var/log/apt
  # Built beside its final place and renamed when complete: an interrupted build leaves no root
  # that the check above would take for a finished one.
  mv -T "$partial" "$root" 2>/dev/null || rm -rf "$partial"
  echo "$root"
}

deno_binary() { # copies Deno's Linux binary of $deno_version to $1
  if [ -n "${DENO_BIN:-}" ]; then
    cp "$DENO_BIN" "$1"
  elif command -v deno >/dev/null 2>&1 &&
    [ "$(deno --version | sed -nE 's/^deno ([^ ]+) .*/\1/p')" = "$deno_version" ]; then
    cp "$(command -v deno)" "$1"
  else
    command -v npm >/dev/null 2>&1 || fail "no deno $deno_version on PATH and no npm: set DENO_BIN"
    packdir=$(mktemp -d)
    (cd "$packdir" && npm pack --silent "@deno/linux-x64-glibc@$deno_version" >/dev/null)
    tar -xzf "$packdir"/*.tgz -C "$packdir" package/deno
    cp "$packdir/package/deno" "$1"
    rm -rf "$packdir"
  fi
  chmod 755 "$1"
}

if $local_bases; then
  BASE_IMAGE=localhost/knp-debian:bookworm
  DENO_IMAGE="localhost/knp-deno:$deno_version"
  BUILD="${BUILD:-bundle}"
  if ! image_exists "$BASE_IMAGE"; then
    root=$(debian_root)
    say "importing $root as $BASE_IMAGE"
    tar -C "$root" -c . | $engine import - "$BASE_IMAGE" >/dev/null
  fi
  if ! image_exists "$DENO_IMAGE"; then
    context=$(mktemp -d)
    deno_binary "$context/deno"
    printf 'FROM %s\nCOPY deno /usr/bin/deno\n' "$BASE_IMAGE" >"$context/Containerfile"
    say "making $DENO_IMAGE (Deno's binary on $BASE_IMAGE)"
    $engine build -q "$@" -t "$DENO_IMAGE" -f "$context/Containerfile" "$context" >/dev/null
    rm -rf "$context"
  fi
fi

# --- the image --------------------------------------------------------------------------------
set -- "$@" --build-arg "BUILD=${BUILD:-compile}"
[ -n "${DENO_IMAGE:-}" ] && set -- "$@" --build-arg "DENO_IMAGE=$DENO_IMAGE"
[ -n "${BASE_IMAGE:-}" ] && set -- "$@" --build-arg "BASE_IMAGE=$BASE_IMAGE"
[ -n "${DENORT_BIN:-}" ] && set -- "$@" --build-arg "DENORT_BIN=$DENORT_BIN"
[ -n "${FFI:-}" ] && set -- "$@" --build-arg "FFI=$FFI"
# A machine that reaches the npm registry through a TLS-inspecting proxy trusts its CA through
# SSL_CERT_FILE or DENO_CERT, else the system bundle: the build's Deno is given the same bundle
# (podman mounts it; Deno adds it to its own roots).
ca="${DENO_CERT:-${SSL_CERT_FILE:-}}"
if [ -z "$ca" ] && [ -r /etc/ssl/certs/ca-certificates.crt ]; then
  ca=/etc/ssl/certs/ca-certificates.crt
fi
if [ "$engine" = podman ] && [ -n "$ca" ] && [ -r "$ca" ]; then
  set -- "$@" --volume "$ca:/run/knp-build-ca.crt:ro" --build-arg DENO_CERT=/run/knp-build-ca.crt
fi
say "building $tag with $engine (BUILD=${BUILD:-compile}, FFI=${FFI:-on}, bases ${DENO_IMAGE:-Dockerfile's} and ${BASE_IMAGE:-Dockerfile's})"
$engine build "$@" -t "$tag" -f Dockerfile .
size=$($engine image inspect --format '{{.Size}}' "$tag")
say "built $tag: $((size / 1000000)) MB, in $(($(date +%s) - started)) s"
