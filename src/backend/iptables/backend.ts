/**
 * The iptables back end: upstream's classic KUBE-* chains, loaded per family with
 * `iptables-restore --noflush` through iptables-nft or iptables-legacy, whichever the node uses
 * (src/render/iptables renders, src/apply/iptables.ts loads).
 *
 * It notices removed rules with upstream's canary chains and the nat jump rules
 * (apply/iptables_watch.ts) — every second; every 10 s with iptables-legacy when it cannot read
 * the tables' summaries (no `--allow-ffi`), since then each check reads the whole nat table — and
 * diffs a dry run against `iptables-save` (dryrun/, loaded only for a dry run). It
 * has no per-service counters, and its ClientIP affinity (`recent` lists) expires by itself.
 *
 * @module
 */
import {
  cleanupIptables,
  IptablesApplier,
  iptablesFamilySupport,
  readConntrackTCPLiberal,
} from "../../apply/iptables.ts";
import { IptablesRulesWatch } from "../../apply/iptables_watch.ts";
import { refusedWarning } from "../../apply/families.ts";
import type { Config } from "../../config/config.ts";
import { IptablesPlanner, isIptablesPlan } from "../../render/iptables/planner.ts";
import type { Backend, BackendContext } from "../backend.ts";

/** A full iptables-legacy check reads the whole nat table (~0.5 s at 10k services). */
const LEGACY_CHECK_INTERVAL_MS = 10_000;

/** The iptables back end for `config`. */
export function createBackend(config: Config, context: BackendContext): Backend {
  const { log, netns } = context;
  const applier = new IptablesApplier({
    backend: config.iptablesBackend,
    netns,
    log: (line) => log.info(line),
  });
  return {
    mode: "iptables",
    probeFamilies: async () => {
      const support = await iptablesFamilySupport({ backend: await applier.backend(), netns });
      return {
        usable: support.usable,
        warnings: support.refused.map((r) => refusedWarning(r.family, r.reason)),
      };
    },
    proxier: async (families) => {
      const backend = await applier.backend();
      const watch = new IptablesRulesWatch({ backend, families, netns });
      return {
        planner: new IptablesPlanner(config, {
          conntrackTCPLiberal: await readConntrackTCPLiberal(),
          families,
        }),
        apply: (script) => watch.applied(() => applier.apply(script)),
        // Full syncs are streamed to iptables-restore as they are rendered, never held whole.
        applyPlan: (plan) =>
          watch.applied(() =>
            isIptablesPlan(plan) ? applier.applyPlan(plan) : applier.apply(plan.script)
          ),
        rulesIntact: () => watch.intact(),
        rulesCheckIntervalMs: backend === "legacy" && !watch.constantCost
          ? LEGACY_CHECK_INTERVAL_MS
          : undefined,
      };
    },
    dryRun: async (script, output) => {
      const { dryRunIptables, formatIptablesDryRun } = await import("../../dryrun/dry_run.ts");
      const report = await dryRunIptables(script, { backend: await applier.backend(), netns });
      return {
        text: formatIptablesDryRun(report, output),
        warnings: report.warnings.map((line) => `${line}; diffing against empty tables`),
      };
    },
    cleanup: async () => {
      await cleanupIptables({ netns });
      return "removed the KUBE-* chains and their jump rules (iptables-nft and iptables-legacy)";
    },
  };
}
