/**
 * The nft planner: both families' syncers behind one call, producing one script that updates
 * the `ip` and `ip6` tables in a single transaction.
 *
 * @module
 */
import type { Config } from "../../config/config.ts";
import type { NodeInfo } from "../../model/node.ts";
import { nftRenderOptions } from "./options.ts";
import { NftSyncer, type SyncInput, type SyncRequest } from "./syncer.ts";
import { type NftFamily, Transaction } from "./transaction.ts";

/** Everything a plan is computed from. */
export interface PlannerInput extends SyncInput {
  readonly node: NodeInfo | null;
  readonly serviceCIDRs: readonly string[];
  /** This node's interface addresses, when known (for CIDR `nodePortAddresses`). */
  readonly localAddresses?: readonly string[];
}

/** One transaction for every family; {@link commit} once it was applied. */
export interface Plan {
  readonly script: string;
  readonly full: boolean;
  readonly servicePortsChanged: number;
  commit(): void;
}

/** Renders state into transactions; implemented by each backend's planner. */
export interface Planner {
  plan(input: PlannerInput, request: SyncRequest): Plan;
  /** Forget what was applied; the next plan re-creates everything. */
  reset(): void;
}

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
