/**
 * The back-end contract: everything a proxy mode does to the kernel, behind one interface, so
 * the entry point, the runner and the servers never ask which mode runs.
 *
 * A {@link Backend} is one mode on this node. Before it programs anything it can ask the kernel
 * which IP families it takes, clean up after itself, and diff a dry run's script against the
 * kernel. For the families to program it opens a {@link Proxier}: the mode's planner plus what
 * works on what that planner planned — applying a script, noticing that someone removed the
 * rules, reading per-service counters, cleaning stale ClientIP affinity. Upstream's `pkg/proxy`
 * has one proxier per mode behind `proxy.Provider`; here the sync loop, the health and metrics
 * servers and conntrack cleanup are shared, and a mode is only what differs.
 *
 * The factory (backends.ts) is the only code that reads `config.mode`; each mode lives in its
 * own folder beside this file (nft/, iptables/), see docs/architecture.md.
 *
 * @module
 */
import type { Config, ProxyMode } from "../config/config.ts";
import type { DryRunOutput } from "../dryrun/dry_run.ts";
import type { Logger } from "../log.ts";
import type { IPFamily } from "../model/service_port.ts";
import type { KernelFamilies } from "../node/node_facts.ts";
import type { Plan, Planner } from "../render/planner.ts";
import type { ServiceConnectionsSource } from "../server/metrics.ts";

/** What every back end is given besides the configuration. */
export interface BackendContext {
  readonly log: Logger;
  /** The `nft` program (the `KUBE_NFTPROXY_NFT` test hook). Default `nft` on the PATH. */
  readonly nftPath?: string;
  /** Work inside this network namespace (`ip netns exec`); for tests. */
  readonly netns?: string;
  /**
   * Told about each thing left by another proxy (another mode of ours, or kube-proxy's ipvs
   * mode) that could not be removed: what, and why. Already logged; for the clean-up failures
   * metric. Default: nothing more.
   */
  readonly cleanupFailed?: (what: string, err: unknown) => void;
}

/** One proxy mode on this node. */
export interface Backend {
  /** The mode, as `--mode` spells it. */
  readonly mode: ProxyMode;
  /**
   * Asks the kernel, changing nothing, which IP families this mode can program, with a warning
   * for each refused one. Throws `NoIPv4Error` when IPv4 is refused (see `readNodeFacts`).
   */
  probeFamilies(): Promise<KernelFamilies>;
  /** Starts programming `families`: the planner and what works on what it plans. */
  proxier(families: readonly IPFamily[]): Promise<Proxier>;
  /**
   * `--dry-run`: diffs the kernel against `script` (what a full sync would send) and formats
   * what would change. Throws {@link DryRunError} when the kernel's rules cannot be read.
   */
  dryRun(script: string, output: DryRunOutput): Promise<DryRunReport>;
  /**
   * Removes every rule and table this mode creates (`--cleanup`, and after the first sync of
   * another mode); resolves with a line saying what was removed.
   */
  cleanup(): Promise<string>;
}

/** One mode programming a fixed set of families. */
export interface Proxier {
  /** Renders the proxy state into this mode's scripts. */
  readonly planner: Planner;
  /** Sends one of the planner's scripts to the kernel as one transaction. */
  apply(script: string): Promise<void>;
  /**
   * Sends one of the planner's plans without writing its script whole first (iptables streams
   * it to `iptables-restore`). Absent: {@link apply} of `plan.script`.
   */
  readonly applyPlan?: (plan: Plan) => Promise<void>;
  /** Whether the kernel still holds our rules (cheap: the daemon runs it every interval). */
  rulesIntact(): Promise<boolean>;
  /** How often {@link rulesIntact} runs, in ms; absent: every second. */
  readonly rulesCheckIntervalMs?: number;
  /**
   * Deletes ClientIP affinity entries of endpoints gone from their service; resolves with how
   * many. Absent: the mode's affinity state cleans itself (or has no shared state).
   */
  readonly cleanStaleAffinity?: () => Promise<number>;
  /** Per-service-port connection totals, read at each metrics scrape. Absent: not counted. */
  readonly serviceConnections?: ServiceConnectionsSource;
}

/** A dry run as printed. */
export interface DryRunReport {
  /** The text for standard output. */
  readonly text: string;
  /** One line per part of the kernel that could not be read (then diffed as empty). */
  readonly warnings: readonly string[];
}

/** The kernel's rules were read but could not be understood: a dry run cannot be printed. */
export class DryRunError extends Error {
  override name = "DryRunError";
}

/** What each mode's module (`nft/backend.ts`, …) exports for the factory. */
export interface BackendModule {
  createBackend(config: Config, context: BackendContext): Backend;
}
