# kube-nftproxy's container image: one `deno compile`d binary on a slim Debian with the kernel
# tools it drives (nft, iptables-restore, conntrack, ip).
#
#   docker build -t kube-nftproxy:0.1.0 .
#   docker build --build-arg DENORT_BIN=/src/denort -t kube-nftproxy:0.1.0 .   # offline denort
#
# `deno compile` downloads Deno's runtime (`denort`, about 40 MB) from Deno's servers once per
# Deno version. Where the build cannot reach them, put a `denort` of the same Deno version
# (2.9.6, linux, this machine's architecture) in the build context and pass its path inside the
# build stage as DENORT_BIN; the npm packages still come from the npm registry.
#
# The image runs as root. Programming the host's netfilter from a pod in the host network
# namespace needs CAP_NET_ADMIN, and the proxy passes it on to the programs it runs (nft,
# iptables-restore, conntrack): a non-root user would only get it through file capabilities set
# on every one of them, which Kubernetes' `capabilities.add` does not provide. deploy/ grants
# NET_ADMIN alone and drops every other capability.

FROM denoland/deno:2.9.6 AS build
ARG DENORT_BIN=""
ENV DENO_NO_UPDATE_CHECK=1
WORKDIR /src
# Dependencies first, so source edits do not invalidate the npm layer.
COPY deno.json deno.lock ./
RUN deno install --frozen
COPY . .
# An empty DENORT_BIN would make deno compile look for a runtime at "", so unset it. The cluster
# file parser runs in a worker, whose module deno compile only embeds when told to (--include).
RUN if [ -z "${DENORT_BIN}" ]; then unset DENORT_BIN; fi \
    && deno compile --allow-all --frozen --include src/source/cluster_file_worker.ts \
       --output /kube-nftproxy main.ts \
    && /kube-nftproxy --version

FROM debian:bookworm-slim AS runtime
# Debian's versions are not pinned: the security archive replaces them, and a pinned version
# would stop building the day it does (hadolint DL3008).
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends nftables iptables conntrack iproute2 \
    && rm -rf /var/lib/apt/lists/*
COPY --from=build /kube-nftproxy /usr/local/bin/kube-nftproxy
# /healthz and /livez (the metrics server listens on 127.0.0.1:10249 by default).
EXPOSE 10256
ENTRYPOINT ["/usr/local/bin/kube-nftproxy"]
