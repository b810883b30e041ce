/**
 * The nft planner: both families' syncers behind one {@link Planner}, producing one script
 * that updates the `ip` and `ip6` tables in a single transaction.
 *
 * @module
 */
import type { Config } from "../../config/config.ts";
import type { Plan, Planner, PlannerInput, SyncRequest } from "../planner.ts";
import { nftRenderOptions } from "./options.ts";
import { NftSyncer } from "./syncer.ts";
import { type NftFamily, Transaction } from "./transaction.ts";

/** Options of an {@link NftPlanner}. */
export interface NftPlannerOptions {
  /** Families to program (a kernel may refuse `ip6`). Default both. */
  readonly families?: readonly NftFamily[];
}

/** Plans nft transactions for both families (or those asked for). */
export class NftPlanner implements Planner {
  readonly #config: Config;
  readonly #syncers: Map<NftFamily, NftSyncer>;

  constructor(config: Config, options: NftPlannerOptions = {}) {
    this.#config = config;
    const families = options.families ?? ["ip", "ip6"];
    this.#syncers = new Map(families.map((f) => [f, new NftSyncer()]));
  }

  plan(input: PlannerInput, request: SyncRequest): Plan {
    const plans = [...this.#syncers.keys()].map((family) =>
      this.#syncers.get(family)!.plan(
        input,
        request,
        nftRenderOptions(this.#config, input, family),
      )
    );
    return {
      script: Transaction.join(plans.map((p) => p.transaction)),
      full: plans.some((p) => p.full),
      servicePortsChanged: Math.max(0, ...plans.map((p) => p.servicePortsChanged)),
      commit: () => plans.forEach((p) => p.commit()),
    };
  }

  reset(): void {
    this.#syncers.forEach((s) => s.reset());
  }

  /** See {@link NftSyncer.affinityTargets} (IPv4: the only family with the shared map). */
  affinityTargets(): Map<string, Set<string>> {
    return this.#syncers.get("ip")?.affinityTargets() ?? new Map();
  }
}
