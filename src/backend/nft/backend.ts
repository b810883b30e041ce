/**
 * The nft back end: the `ip` and `ip6` `kube-nftproxy` tables, each sync one `nft -f`
 * transaction (src/render/nft renders it, src/apply/nft.ts loads it).
 *
 * Besides planning and applying, nft mode notices removed rules by reading its two dispatch
 * chains over netlink (apply/nft_watch.ts; one check-only `nft -c` where FFI is not allowed), reads per-service connection counters
 * from the dispatch maps over netlink (apply/service_counters.ts, apply/nft_netlink.ts), deletes stale ClientIP affinity entries from the
 * shared IPv4 map (apply/affinity.ts), and diffs a dry run against the listed tables
 * (dryrun/, loaded only for a dry run). After each full sync it deletes a trace table a killed
 * `kube-nftproxy trace` left behind (never one whose `trace` still runs: trace/leftover.ts).
 *
 * @module
 */
import { cleanStaleAffinity } from "../../apply/affinity.ts";
import { refusedWarning } from "../../apply/families.ts";
import {
  applyNft,
  deleteTables,
  nftFamilySupport,
  type NftRunnerOptions,
} from "../../apply/nft.ts";
import { applyOverNetlink, stageTableName } from "../../apply/nft_batch.ts";
import { netlinkAvailable, NetlinkError } from "../../apply/nft_netlink.ts";
import { nftRulesChecker } from "../../apply/nft_watch.ts";
import {
  netlinkServiceCounterReader,
  nftServiceCounterReader,
  ServiceCounters,
} from "../../apply/service_counters.ts";
import type { Config } from "../../config/config.ts";
import type { IPFamily } from "../../model/service_port.ts";
import type { Planner } from "../../render/planner.ts";
import { NftPlanner } from "../../render/nft/planner.ts";
import { removeLeftoverTrace } from "../../trace/leftover.ts";
import { ipFamilyOf, nftFamilyOf } from "../../render/nft/transaction.ts";
import { type Backend, type BackendContext, DryRunError, type Proxier } from "../backend.ts";

/** The nft back end for `config`. */
export function createBackend(config: Config, context: BackendContext): Backend {
  const table = config.tableName;
  const nft: NftRunnerOptions = { nftPath: context.nftPath, netns: context.netns };
  return {
    mode: "nft",
    probeFamilies: async () => {
      const support = await nftFamilySupport(table, nft);
      return {
        usable: support.usable.map(ipFamilyOf),
        warnings: support.refused.map((r) => refusedWarning(r.family, r.reason)),
      };
    },
    proxier: (families) => Promise.resolve(nftProxier(config, nft, families, context)),
    dryRun: async (script, output) => {
      const { dryRunNft, formatDryRun } = await import("../../dryrun/dry_run.ts");
      const { TableTextError } = await import("../../dryrun/table_image.ts");
      let report;
      try {
        report = await dryRunNft(script, nft);
      } catch (err) {
        if (!(err instanceof TableTextError)) throw err;
        throw new DryRunError(`cannot read the kernel's tables for a dry run: ${err.message}`, {
          cause: err,
        });
      }
      return {
        text: formatDryRun(report.diff, output),
        warnings: report.warnings.map((line) => `${line}; diffing against an empty table`),
      };
    },
    cleanup: async () => {
      await deleteTables(table, nft);
      await deleteTables(stageTableName(table), nft);
      return `removed tables ip/ip6 ${table}`;
    },
  };
}

function nftProxier(
  config: Config,
  nft: NftRunnerOptions,
  families: readonly IPFamily[],
  context: BackendContext,
): Proxier {
  const table = config.tableName;
  const nftFamilies = families.map(nftFamilyOf);
  const planner = new NftPlanner(config, { families: nftFamilies });
  // Netlink reads the namespace the daemon runs in; a test running nft elsewhere lists there.
  const counterReader = nft.netns === undefined
    ? netlinkServiceCounterReader
    : nftServiceCounterReader;
  const counters = new ServiceCounters(counterReader(table, { ...nft, families: nftFamilies }));
  /**
   * Whether the last plan was full: the sync loop applies each plan right after making it, so
   * the next apply is a full sync. A flag, not the script: that would keep megabytes alive.
   */
  let fullPlanned = false;
  const syncPlanner: Planner = {
    plan: (input, request) => {
      const plan = planner.plan(input, request);
      fullPlanned = plan.full;
      return plan;
    },
    reset: () => planner.reset(),
  };
  // A full sync goes over netlink where it can (nft_batch.ts): from the daemon's own namespace,
  // with FFI allowed; without FFI, nft -f for good. After a refusal nft -f gets the same
  // script, and says what is wrong with it when something is.
  let netlinkWrites = nft.netns === undefined && netlinkAvailable();
  if (nft.netns === undefined) {
    context.log.info(
      netlinkWrites
        ? "asking the kernel over netlink: full syncs, the rules check, per-service counters"
        : "libc cannot be called (no FFI permission): full syncs, the rules check and " +
          "per-service counters run nft (slower, and a large child at a full sync; README, " +
          "Permissions)",
    );
  }
  const applyFull = async (script: string) => {
    if (netlinkWrites) {
      try {
        if (await applyOverNetlink(script, { table, runNft: (s) => applyNft(s, nft) })) return;
      } catch (error) {
        if (error instanceof NetlinkError && error.errno === 0) netlinkWrites = false;
        // Throws nft's own error, naming the line, for a script that is wrong.
        await applyNft(script, nft);
        const reason = (error as Error).message;
        context.log.warn("the full sync was applied with nft -f, not over netlink", { reason });
        return;
      }
    }
    await applyNft(script, nft);
  };
  return {
    planner: syncPlanner,
    apply: async (script) => {
      const full = fullPlanned;
      fullPlanned = false;
      await (full ? applyFull(script) : applyNft(script, nft));
      // Best effort: a leftover trace only costs traced packets, never a sync.
      if (full) await removeLeftoverTrace(table, nft).catch(() => {});
    },
    rulesIntact: nftRulesChecker(table, { ...nft, families: nftFamilies }),
    cleanStaleAffinity: () => cleanStaleAffinity(planner, { table, ...nft }),
    serviceConnections: () => counters.read(),
  };
}
