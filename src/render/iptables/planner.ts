/**
 * The iptables planner: both families' syncers behind the {@link Planner} interface every back
 * end implements, producing one script with an `iptables-restore` section for IPv4 and one for
 * IPv6 (see script.ts for the format; `applyIptables` in src/apply/iptables.ts runs it).
 *
 * @example
 * ```ts
 * const planner = new IptablesPlanner(config);
 * const plan = planner.plan(state, { full: true, changed: new Set() });
 * await applier.apply(plan.script);
 * plan.commit();
 * ```
 *
 * @module
 */
import type { Config } from "../../config/config.ts";
import { familyOf, type IPFamily } from "../../model/service_port.ts";
import type { Plan, Planner, PlannerInput, SyncRequest } from "../planner.ts";
import { iptablesRenderOptions } from "./options.ts";
import { IptablesSyncer, type IptablesSyncPlan } from "./syncer.ts";

/** Options of an {@link IptablesPlanner}. */
export interface IptablesPlannerOptions {
  /**
   * The kernel's `net.netfilter.nf_conntrack_tcp_be_liberal` is set: KUBE-FORWARD then drops no
   * INVALID packets (upstream reads the sysctl at start-up). Default false.
   */
  conntrackTCPLiberal?: boolean;
  /** Families to program. Default both. */
  families?: readonly IPFamily[];
}

/** Plans iptables-restore scripts for both families. */
export class IptablesPlanner implements Planner {
  readonly #config: Config;
  readonly #liberal: boolean;
  readonly #syncers: Map<IPFamily, IptablesSyncer>;

  constructor(config: Config, options: IptablesPlannerOptions = {}) {
    this.#config = config;
    this.#liberal = options.conntrackTCPLiberal ?? false;
    const families = options.families ?? ["IPv4", "IPv6"];
    this.#syncers = new Map(families.map((f) => [f, new IptablesSyncer()]));
  }

  plan(input: PlannerInput, request: SyncRequest): IptablesPlan {
    // Nothing changed: nothing to render (the options only change with the node, the service
    // CIDRs — a full sync — or endpoints, which would be in `changed`).
    const syncers = [...this.#syncers.values()];
    if (!request.full && request.changed.size === 0 && syncers.every((s) => s.hasApplied)) {
      return iptablesPlan([]);
    }
    const totals = countEndpoints(input);
    return iptablesPlan([...this.#syncers].map(([family, syncer]) => ({
      family,
      plan: syncer.plan(
        input,
        request,
        iptablesRenderOptions(this.#config, {
          node: input.node,
          serviceCIDRs: input.serviceCIDRs,
          localAddresses: input.localAddresses,
          totalEndpoints: totals[family],
          conntrackTCPLiberal: this.#liberal,
        }, family),
      ),
    })));
  }

  reset(): void {
    this.#syncers.forEach((s) => s.reset());
  }
}

/** One family's part of an {@link IptablesPlan}. */
export interface FamilyPlan {
  readonly family: IPFamily;
  readonly plan: IptablesSyncPlan;
}

/**
 * A plan of the iptables planner. Its full sections are rendered only as they are consumed: the
 * applier streams {@link sections} to `iptables-restore`; reading {@link Plan.script} writes the
 * whole text (a dry run, tests).
 */
export interface IptablesPlan extends Plan {
  /** Both families' sections, IPv4 first; a family with nothing to change is left out. */
  readonly sections: readonly FamilyPlan[];
}

/** True for a plan of {@link IptablesPlanner} (the applier can stream it). */
export function isIptablesPlan(plan: Plan): plan is IptablesPlan {
  return "sections" in plan && Array.isArray((plan as IptablesPlan).sections);
}

function iptablesPlan(families: readonly FamilyPlan[]): IptablesPlan {
  const sections = families.filter((f) => f.plan.full || f.plan.script !== "");
  let script: string | undefined;
  return {
    sections,
    get script() {
      return script ??= sections.map((s) => s.plan.script).join("");
    },
    empty: sections.length === 0,
    get bytes() {
      return script?.length ?? sections.reduce((n, s) => n + s.plan.sentBytes, 0);
    },
    full: families.some((f) => f.plan.full),
    servicePortsChanged: Math.max(0, ...families.map((f) => f.plan.servicePortsChanged)),
    commit: () => families.forEach((f) => f.plan.commit()),
  };
}

/** Endpoints per family of the service ports in the state (upstream's large-cluster count). */
function countEndpoints(input: PlannerInput): Record<IPFamily, number> {
  const totals: Record<IPFamily, number> = { IPv4: 0, IPv6: 0 };
  for (const key of input.services.keys()) {
    for (const ep of input.endpoints.get(key) ?? []) totals[familyOf(ep.ip)]++;
  }
  return totals;
}
