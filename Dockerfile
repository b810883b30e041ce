# kube-nftproxy's container image: the proxy, run by Deno with only the permissions it needs, on a
# slim Debian with the kernel tools it drives (nft, iptables-restore, conntrack, ip, ipset,
# ipvsadm).
#
#   docker build -t kube-nftproxy:0.1.0 .                                      # with internet
#   docker build --build-arg DENORT_BIN=/src/denort -t kube-nftproxy:0.1.0 .   # offline denort
#   deno task image         # no Deno servers, no image registry (README, "The container image")
#
# Build arguments:
# - BUILD: `compile` (default) makes one `deno compile`d binary; it needs Deno's runtime
#   (`denort`, about 40 MB) from Deno's servers, once per Deno version, or a `denort` of the same
#   Deno version (2.9.6, linux, this architecture) put in the build context and named by
#   DENORT_BIN as seen in the build stage (/src/denort). `bundle` needs neither: `deno bundle`
#   makes one JavaScript file, run by Deno's own binary copied from the build stage.
# - DENO_IMAGE, BASE_IMAGE: the build stage's image (any Debian 12 with `deno` on its PATH) and
#   the runtime's (Debian 12). An operator's mirror, or the local images `deno task image` makes
#   from Debian's archive and npm's Deno package when no registry can be reached.
# - FFI: `on` (default) lets the proxy call libc, and only libc, for netlink; `off` leaves FFI out
#   of its permissions (scripts/image_build.sh says what that costs and what it keeps out).
# The npm packages still come from the npm registry, and the kernel tools from Debian's archive.
#
# The image runs as root. Programming the host's netfilter from a pod in the host network
# namespace needs CAP_NET_ADMIN, and the proxy passes it on to the programs it runs (nft,
# iptables-restore, conntrack): a non-root user would only get it through file capabilities set
# on every one of them, which Kubernetes' `capabilities.add` does not provide. deploy/ grants
# NET_ADMIN alone and drops every other capability. Deno's permissions (scripts/image_build.sh)
# keep the proxy itself to the programs, files and variables it uses, and to libc for netlink.

ARG DENO_IMAGE=denoland/deno:2.9.6
ARG BASE_IMAGE=debian:bookworm-slim

FROM ${DENO_IMAGE} AS build
ARG BUILD=compile
ARG DENORT_BIN=""
# `off` runs the proxy without FFI (see scripts/image_build.sh: no netlink, more `nft` children).
ARG FFI=on
# Only where a TLS-inspecting proxy stands between the build and the npm registry: its CA bundle
# as mounted into the build (`deno task image` mounts the machine's with podman).
ARG DENO_CERT
ENV DENO_NO_UPDATE_CHECK=1
WORKDIR /src
# Dependencies first, so source edits do not invalidate the npm layer.
COPY deno.json deno.lock ./
RUN deno install --frozen
COPY . .
# The cluster file parser runs in a worker, whose module the build keeps beside main.ts.
RUN FFI="${FFI}" sh scripts/image_build.sh "${BUILD}" /out

FROM ${BASE_IMAGE} AS runtime
# Debian's versions are not pinned: the security archive replaces them, and a pinned version
# would stop building the day it does (hadolint DL3008).
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends nftables iptables conntrack iproute2 ipset ipvsadm \
    && rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin /var/log/apt /var/log/dpkg.log \
       /usr/share/doc /usr/share/man /usr/share/info /usr/share/locale
COPY --from=build /out/ /usr/local/
# /healthz and /livez (the metrics server listens on 127.0.0.1:10249 by default).
EXPOSE 10256
ENTRYPOINT ["/usr/local/bin/kube-nftproxy"]
