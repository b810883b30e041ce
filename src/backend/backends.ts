/**
 * The back-end factory: the one place that reads `config.mode`. Each mode's module is loaded
 * when that mode is asked for, so a run loads its own back end and no other.
 *
 * Adding a mode: a folder beside nft/ and iptables/ whose `backend.ts` exports `createBackend`
 * (see backend.ts), and one line in {@link BACKENDS}.
 *
 * @module
 */
import { removeIpvsLeftovers } from "../apply/ipvs_leftovers.ts";
import { deleteTables } from "../apply/nft.ts";
import { FIXED_CHAINS } from "../render/iptables/names.ts";
import type { Config, ProxyMode } from "../config/config.ts";
import type { Backend, BackendContext, BackendModule } from "./backend.ts";

/**
 * The table upstream kube-proxy's nftables mode programs, in the `ip` and `ip6` families
 * (`kubeProxyTable` in its `pkg/proxy/nftables/proxier.go`). Left behind by a kube-proxy that ran
 * before us, its filter chains keep rejecting Services that had no endpoints then and its nat
 * chains keep DNATing to endpoints that may be gone.
 */
export const UPSTREAM_NFT_TABLE = "kube-proxy";

/** Every mode's module, loaded on first use. */
const BACKENDS: Readonly<Record<ProxyMode, () => Promise<BackendModule>>> = {
  nft: () => import("./nft/backend.ts"),
  iptables: () => import("./iptables/backend.ts"),
};

/**
 * The back end of `config.mode`. The first successful apply of its proxier also removes every
 * other mode's rules (switching modes is one restart: the new rules are in place before the old
 * ones go); a failure there is logged and never fails the sync.
 *
 * @example
 * ```ts
 * const backend = await createBackend(config, { log });
 * const proxier = await backend.proxier(["IPv4", "IPv6"]);
 * ```
 */
export async function createBackend(config: Config, context: BackendContext): Promise<Backend> {
  const backend = (await BACKENDS[config.mode]()).createBackend(config, context);
  return {
    ...backend,
    proxier: async (families) => {
      const proxier = await backend.proxier(families);
      // One clean-up whichever of apply and applyPlan (iptables mode's full syncs) comes first.
      let removed = false;
      const removeOthers = async () => {
        if (removed) return;
        removed = true;
        await removeOtherModes(config, context);
      };
      const warn = (err: unknown) => {
        context.log.warn(`cannot remove the other mode's rules: ${(err as Error).message}`);
        context.cleanupFailed?.("the other mode's rules", err);
      };
      return {
        ...proxier,
        apply: afterFirstApply(proxier.apply, removeOthers, warn),
        applyPlan: proxier.applyPlan && afterFirstApply(proxier.applyPlan, removeOthers, warn),
      };
    },
  };
}

/**
 * Removes the rules of every mode but `config.mode` (each mode's {@link Backend.cleanup}): what an
 * earlier run in another mode left, upstream kube-proxy's nftables tables
 * ({@link removeUpstreamTables}) and what its ipvs mode left ({@link removeIpvsModeLeftovers}).
 * Upstream removes every other mode's rules before it starts (`platformCleanup` in
 * `cmd/kube-proxy/app/server_linux.go`); here it runs once our own rules are in place, so no
 * packet meets a node without rules. Every step is tried; the first error is thrown after them
 * all (the ipvs leftovers report their own failures to `context.cleanupFailed`).
 */
export async function removeOtherModes(config: Config, context: BackendContext): Promise<void> {
  const errors: unknown[] = [];
  for (const mode of Object.keys(BACKENDS) as ProxyMode[]) {
    if (mode === config.mode) continue;
    await (await BACKENDS[mode]()).createBackend({ ...config, mode }, context).cleanup()
      .catch((err) => errors.push(err));
  }
  await removeUpstreamTables(config, context).catch((err) => errors.push(err));
  await removeIpvsModeLeftovers(context, { keepIptablesMode: config.mode === "iptables" });
  if (errors.length > 0) throw errors[0];
}

/**
 * Removes what kube-proxy's ipvs mode left (IPVS virtual servers, `kube-ipvs0`, its `KUBE-*`
 * chains and ipsets; see apply/ipvs_leftovers.ts), after the other modes' clean-up so that the
 * ipsets are no longer referenced. With `keepIptablesMode` the chains the iptables mode
 * programs (same names as some of ipvs mode's) stay. Never throws: each failure is logged and
 * told to `context.cleanupFailed`.
 */
export async function removeIpvsModeLeftovers(
  context: BackendContext,
  options: { keepIptablesMode: boolean },
): Promise<void> {
  await removeIpvsLeftovers({
    log: (line) => context.log.info(line),
    note: (line) => context.log.debug(1, line),
    onFailure: (what, err) => {
      context.log.warn(`cannot remove ${what} left by kube-proxy's ipvs mode: ${errorText(err)}`);
      context.cleanupFailed?.(what, err);
    },
    keep: options.keepIptablesMode ? FIXED_CHAINS : undefined,
    netns: context.netns,
  });
}

function errorText(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

/**
 * Deletes upstream kube-proxy's `ip`/`ip6` {@link UPSTREAM_NFT_TABLE} tables where present,
 * logging one line naming them; nothing else is touched, and nothing when our own tables carry
 * that name (`--table-name=kube-proxy`).
 */
export async function removeUpstreamTables(
  config: Config,
  context: BackendContext,
): Promise<void> {
  if (config.tableName === UPSTREAM_NFT_TABLE) return;
  const nft = { nftPath: context.nftPath, netns: context.netns };
  const families = await deleteTables(UPSTREAM_NFT_TABLE, nft);
  if (families.length === 0) return;
  const names = families.map((family) => `${family} ${UPSTREAM_NFT_TABLE}`).join(", ");
  context.log.info(`removed kube-proxy's nftables tables left on this node (${names})`);
}

/** The clean-ups the command line asks for. */
export interface CleanupRequest {
  /** `--cleanup`: the nft tables (ours and kube-proxy's), and the configured mode's rules. */
  readonly cleanup: boolean;
  /** `--cleanup-iptables`: the iptables mode's KUBE-* chains, whatever the mode. */
  readonly cleanupIptables: boolean;
}

/**
 * Runs the clean-ups asked for, logging one line per mode cleaned. `--cleanup` always removes
 * the nft tables (the native mode's, which any earlier run may have left, and kube-proxy's
 * nftables tables, as upstream's own `--cleanup` does), then the configured mode's rules, then
 * what kube-proxy's ipvs mode left; `--cleanup-iptables` removes the iptables mode's.
 */
export async function cleanUp(
  config: Config,
  context: BackendContext,
  request: CleanupRequest,
): Promise<void> {
  const modes = new Set<ProxyMode>();
  if (request.cleanup) modes.add("nft").add(config.mode);
  if (request.cleanupIptables) modes.add("iptables");
  for (const mode of modes) {
    const backend = (await BACKENDS[mode]()).createBackend({ ...config, mode }, context);
    context.log.info(await backend.cleanup());
  }
  if (request.cleanup) {
    await removeUpstreamTables(config, context);
    await removeIpvsModeLeftovers(context, { keepIptablesMode: false });
  }
}

/**
 * Wraps an apply function so that `then` runs once, right after the first successful apply
 * (an empty script counts: the kernel already holds our rules). A failing `then` is reported
 * to `onError` and not retried; the sync itself has succeeded.
 *
 * @example
 * ```ts
 * const apply = afterFirstApply((s) => proxier.apply(s), () => removeOtherModes(config, context));
 * ```
 */
export function afterFirstApply<T = string>(
  apply: (script: T) => Promise<void>,
  then: () => Promise<void>,
  onError: (err: unknown) => void = () => {},
): (script: T) => Promise<void> {
  let done = false;
  return async (script) => {
    await apply(script);
    if (done) return;
    done = true;
    try {
      await then();
    } catch (err) {
      onError(err);
    }
  };
}
