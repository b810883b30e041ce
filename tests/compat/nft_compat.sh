#!/usr/bin/env bash
# Compatibility job: the tests that read the kernel back, and a sample of the packet-flow
# tests, with Debian 13's nft 1.1.3 instead of the machine's own — for the proxy
# (KUBE_NFTPROXY_NFT) and for the test harness (`nft` first on PATH) alike.
#
#   tests/compat/nft_compat.sh                      # as root, from anywhere
#   DENO="npx -y deno@2.9.6" tests/compat/nft_compat.sh
#
# Builds the Debian 13 root once (tests/compat/debian13_root.sh; cached in
# /var/cache/knp/trixie-nft, KNP_DEBIAN13_ROOT to move it). Where the Debian archive cannot be
# reached and no root is cached, prints one SKIP line and exits 0. Ends with "N passed, M
# failed" like .ci/run; exit status 0 only when everything passed.
#
# What runs, and why (the readers' unit tests on both releases' captured listings,
# tests/fixtures/nft/, need no kernel and run in the normal suite):
# - src/apply/{affinity,nft_watch,nft_atomic,families}_test.ts: the kernel-facing parts of
#   applying and reading back (stale affinity entries, the rules-intact check, family probes);
# - tests/e2e/dry_run_test.ts: `--dry-run` prints no change right after a sync, its diff
#   applies, and `explain --live` agrees with the kernel;
# - tests/e2e/explain_test.ts: `explain --live` on every semantics case;
# - tests/e2e/trace_test.ts: `trace` reads `nft monitor trace`, element comments and chain
#   hooks as this release prints them;
# - tests/e2e/counters_test.ts: per-service counters match the connections made;
# - tests/e2e/affinity_sync_test.ts: ClientIP affinity entries survive a sync;
# - tests/e2e/semantics_test.ts: the packet-flow cases, self-healing after `nft flush
#   ruleset`, a restart over existing rules;
# - tests/property/dry_run_property_test.ts (PROPERTY_RUNS=200): a dry run right after a
#   load is empty, for generated clusters.
set -uo pipefail
cd "$(dirname "$0")/../.."
export DENO_NO_UPDATE_CHECK=1 NO_COLOR=1
DENO="${DENO:-deno}"

bin="$(mktemp -d)"
log="$(mktemp)"
trap 'rm -rf "$bin" "$log"' EXIT

root="$(tests/compat/debian13_root.sh 2>"$log")"
case $? in
  0) ;;
  3)
    echo "SKIP nft 1.1.3 compatibility: the Debian archive cannot be reached and no Debian 13 root is cached"
    exit 0
    ;;
  *)
    cat "$log"
    echo "0 passed, 1 failed"
    exit 1
    ;;
esac
ln -s "$PWD/tests/compat/nft-1.1.3" "$bin/nft"
export PATH="$bin:$PATH" KUBE_NFTPROXY_NFT="$bin/nft" KNP_DEBIAN13_ROOT="$root"
version="$(nft --version)"
if [[ "$version" != *"v1.1.3 "* ]]; then
  echo "expected nft 1.1.3 from $root, got: $version"
  echo "0 passed, 1 failed"
  exit 1
fi
echo "nft compatibility: $version (from $root)"

PROPERTY_RUNS="${PROPERTY_RUNS:-200}" $DENO test -A \
  src/apply/affinity_test.ts \
  src/apply/nft_watch_test.ts \
  src/apply/nft_atomic_test.ts \
  src/apply/families_test.ts \
  tests/e2e/dry_run_test.ts \
  tests/e2e/explain_test.ts \
  tests/e2e/trace_test.ts \
  tests/e2e/counters_test.ts \
  tests/e2e/affinity_sync_test.ts \
  tests/e2e/semantics_test.ts \
  tests/property/dry_run_property_test.ts \
  2>&1 | tee "$log"
status="${PIPESTATUS[0]}"

summary="$(grep -E '(ok|FAILED) \| [0-9]+ passed' "$log" | tail -n 1)"
passed="$(sed -nE 's/.* ([0-9]+) passed.*/\1/p' <<<"$summary")"
failed="$(sed -nE 's/.* ([0-9]+) failed.*/\1/p' <<<"$summary")"
[ "$status" -eq 0 ] || [ "${failed:-0}" -gt 0 ] || failed=1
echo "${passed:-0} passed, ${failed:-1} failed"
exit "$status"
