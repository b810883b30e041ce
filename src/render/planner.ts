/**
 * The planner contract every back end's renderer implements: what a plan is computed from (the
 * proxy state and the cluster facts), what it asks for (a full or a partial sync) and what it
 * returns (one script, applied as one transaction, then committed).
 *
 * Neutral ground between the back ends: `render/nft` and `render/iptables` both implement
 * {@link Planner} and import it from here, never from each other; the sync loop and the back ends
 * (`src/backend/`) only know this interface.
 *
 * @module
 */
import type { Endpoint } from "../model/endpoint.ts";
import type { NodeInfo } from "../model/node.ts";
import type { ServicePort } from "../model/service_port.ts";

/** The state a plan is computed from: service ports and their endpoints, by service port key. */
export interface SyncInput {
  readonly services: ReadonlyMap<string, ServicePort>;
  readonly endpoints: ReadonlyMap<string, readonly Endpoint[]>;
}

/** Which service ports to re-render, or everything. */
export interface SyncRequest {
  /** Re-render and re-assert everything. */
  readonly full: boolean;
  /** Service port keys to re-render in a partial sync. */
  readonly changed: ReadonlySet<string>;
}

/** What the rules depend on besides the services and endpoints (and the configuration). */
export interface ClusterFacts {
  /** This node's Node object, once listed. */
  readonly node: NodeInfo | null;
  /** The cluster's service CIDRs (`ServiceCIDR` objects), both families. */
  readonly serviceCIDRs: readonly string[];
  /** Addresses on this node's interfaces (for CIDR `nodePortAddresses`); absent if unknown. */
  readonly localAddresses?: readonly string[];
}

/** Everything a plan is computed from. */
export interface PlannerInput extends SyncInput, ClusterFacts {}

/** One transaction for every family; {@link commit} once it was applied. */
export interface Plan {
  /** The script for the back end's loader (`nft -f`, `iptables-restore`); "" for no change. */
  readonly script: string;
  /**
   * Whether there is nothing to apply, for a plan whose script is written only when read (the
   * iptables planner streams it to its loader). Absent: `script === ""`.
   */
  readonly empty?: boolean;
  /** The script's length without writing it (once applied, for a streamed plan). */
  readonly bytes?: number;
  readonly full: boolean;
  /** Number of service ports whose rules the plan changes. */
  readonly servicePortsChanged: number;
  /** Records the plan as applied: the next partial plan starts from it. */
  commit(): void;
}

/**
 * Renders state into transactions. Pure: remembers what it planned, and that memory advances
 * only on {@link Plan.commit}.
 *
 * @example
 * ```ts
 * const plan = planner.plan(state, { full: true, changed: new Set() });
 * await apply(plan.script);
 * plan.commit();
 * ```
 */
export interface Planner {
  plan(input: PlannerInput, request: SyncRequest): Plan;
  /** Forget what was applied; the next plan re-creates everything. */
  reset(): void;
}
