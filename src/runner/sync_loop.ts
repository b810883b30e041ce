/**
 * The sync loop: one sync takes the pending changes from the proxy state, plans one transaction
 * and applies it; it decides between a partial and a full sync.
 *
 * A sync is full on the first run, after any failure (the kernel may hold something other than
 * what was planned last), when something every service depends on changed (node, service
 * CIDRs), and periodically (upstream's hourly re-assert). A sync with nothing to change sends
 * nothing to the kernel.
 *
 * @module
 */
import type { Logger } from "../log.ts";
import type { Plan, Planner } from "../render/planner.ts";
import type { ProxyState } from "../tracker/proxy_state.ts";
import { type Clock, realClock } from "./clock.ts";

/** Upstream's period of forced full syncs (`FullSyncPeriod`): one hour. */
export const FULL_SYNC_PERIOD_MS = 60 * 60 * 1000;

/** Options of a {@link SyncLoop}. */
export interface SyncLoopOptions {
  /** Renders state into scripts. */
  planner: Planner;
  /** Sends a script to the kernel as one transaction (or prints it, in dry-run mode). */
  apply: (script: string) => Promise<void>;
  /** Sends a whole plan instead (a back end that streams its script); absent: {@link apply}. */
  applyPlan?: (plan: Plan) => Promise<void>;
  log: Logger;
  /** Default {@link realClock}. */
  clock?: Clock;
  /** Default {@link FULL_SYNC_PERIOD_MS}. */
  fullSyncPeriodMs?: number;
  /**
   * This node's interface addresses, read before each sync (CIDR `nodePortAddresses` select
   * node-port addresses from them; a change makes that sync a full one). Default: none.
   */
  localAddresses?: () => readonly string[] | undefined;
}

/** What one sync did. */
export interface SyncOutcome {
  readonly full: boolean;
  /** False when there was nothing to send. */
  readonly applied: boolean;
  readonly scriptBytes: number;
  readonly servicePortsChanged: number;
  readonly durationMs: number;
  /** Where {@link durationMs} went, in ms: taking the changes, rendering, applying. */
  readonly phasesMs: { readonly track: number; readonly render: number; readonly apply: number };
  /** Trigger times (ms since the epoch) of the endpoint changes this sync programmed. */
  readonly triggerTimes: readonly number[];
  /** This node's interface addresses as read for this sync, when known. */
  readonly localAddresses: readonly string[] | undefined;
  /**
   * Service port keys whose service or endpoints changed since the last sync (what a partial
   * sync re-rendered); a full sync re-asserted every port besides these.
   */
  readonly changed: ReadonlySet<string>;
}

/** Runs syncs; each call of {@link sync} is one sync. Never call it concurrently. */
export class SyncLoop {
  readonly #state: ProxyState;
  readonly #options:
    & Required<Omit<SyncLoopOptions, "applyPlan">>
    & Pick<SyncLoopOptions, "applyPlan">;
  #needFull = true;
  #lastFullAt = -Infinity;
  #lastSuccessAt: number | undefined;
  #consecutiveFailures = 0;
  #lastAttemptFull = false;

  constructor(state: ProxyState, options: SyncLoopOptions) {
    this.#state = state;
    this.#options = {
      ...options,
      clock: options.clock ?? realClock,
      fullSyncPeriodMs: options.fullSyncPeriodMs ?? FULL_SYNC_PERIOD_MS,
      localAddresses: options.localAddresses ?? (() => undefined),
    };
  }

  /** Time of the last successful sync, if any. */
  get lastSuccessAt(): number | undefined {
    return this.#lastSuccessAt;
  }

  /**
   * Whether the last sync that started (successful or not) was a full one; read it after a
   * failure to count the failure as upstream does (full or partial).
   */
  get lastAttemptFull(): boolean {
    return this.#lastAttemptFull;
  }

  /** Failed syncs since the last success. */
  get consecutiveFailures(): number {
    return this.#consecutiveFailures;
  }

  /** Makes the next sync a full one. */
  requestFullSync(): void {
    this.#needFull = true;
  }

  /**
   * Runs one sync. Throws when the transaction was refused (the kernel is then unchanged); the
   * next sync is then a full one.
   */
  async sync(): Promise<SyncOutcome> {
    const { clock, planner, log } = this.#options;
    const started = clock.now();
    const changes = this.#state.takeChanges();
    const tracked = clock.now();
    let rendered = tracked;
    const full = this.#needFull || changes.global ||
      started - this.#lastFullAt >= this.#options.fullSyncPeriodMs;
    this.#lastAttemptFull = full;
    let plan;
    const localAddresses = this.#options.localAddresses();
    try {
      const state = this.#state;
      const input = {
        services: state.services,
        endpoints: state.endpoints,
        node: state.node,
        serviceCIDRs: state.serviceCIDRs,
        localAddresses,
      };
      plan = planner.plan(input, { full, changed: changes.changed });
      rendered = clock.now();
      if (!(plan.empty ?? plan.script === "")) {
        const { apply, applyPlan } = this.#options;
        await (applyPlan ? applyPlan(plan) : apply(plan.script));
      }
    } catch (err) {
      // The changes taken above are folded into the state already: only a full sync is sure
      // to carry them to the kernel.
      this.#needFull = true;
      this.#consecutiveFailures++;
      throw err;
    }
    plan.commit();
    if (full) this.#lastFullAt = started;
    this.#needFull = false;
    this.#consecutiveFailures = 0;
    this.#lastSuccessAt = clock.now();
    const outcome: SyncOutcome = {
      full,
      applied: !(plan.empty ?? plan.script === ""),
      scriptBytes: plan.bytes ?? plan.script.length,
      servicePortsChanged: plan.servicePortsChanged,
      durationMs: clock.now() - started,
      phasesMs: {
        track: tracked - started,
        render: rendered - tracked,
        apply: this.#lastSuccessAt - rendered,
      },
      changed: changes.changed,
      triggerTimes: changes.triggerTimes,
      localAddresses,
    };
    log.debug(
      outcome.applied ? 1 : 4,
      `synced ${
        full ? "fully" : "partially"
      }: ${outcome.servicePortsChanged} service ports changed, ` +
        `${outcome.scriptBytes} bytes sent, ${outcome.durationMs} ms`,
    );
    return outcome;
  }
}
