/**
 * The proxy's lifecycle: wires a source, the proxy state, a planner and an applier into the
 * sync loop, then runs once (`--once`) or as a daemon until SIGTERM/SIGINT.
 *
 * On shutdown the rules stay in the kernel, so traffic keeps flowing while the proxy restarts;
 * the next start reconciles them in its first (table-recreating) transaction.
 *
 * @module
 */
import type { Config } from "../config/config.ts";
import type { Logger } from "../log.ts";
import type { Planner } from "../render/nft/planner.ts";
import type { Source } from "../source/events.ts";
import { ProxyState } from "../tracker/proxy_state.ts";
import { BoundedFrequencyRunner } from "./bounded_runner.ts";
import { type Clock, realClock } from "./clock.ts";
import { SyncLoop } from "./sync_loop.ts";

/** Everything {@link runProxy} needs, already built. */
export interface ProxyParts {
  readonly config: Config;
  readonly source: Source;
  readonly planner: Planner;
  /** Sends one script to the kernel (or prints it in dry-run mode). */
  readonly apply: (script: string) => Promise<void>;
  readonly log: Logger;
  readonly clock?: Clock;
}

/** How {@link runProxy} runs. */
export interface RunOptions {
  /** One full sync, then return. */
  readonly once: boolean;
  /** Ends the daemon when aborted (e.g. on SIGTERM). */
  readonly signal?: AbortSignal;
}

/**
 * Runs the proxy; resolves with the process exit code (0 on success).
 *
 * @example
 * ```ts
 * const code = await runProxy(parts, { once: true });
 * ```
 */
export async function runProxy(parts: ProxyParts, options: RunOptions): Promise<number> {
  const { config, source, planner, log } = parts;
  const holder: { runner?: BoundedFrequencyRunner } = {};
  let synced!: () => void;
  const listed = new Promise<void>((resolve) => synced = resolve);
  const state = new ProxyState({
    hostname: config.hostname,
    log: (line) => log.warn(line),
    onChange: () => holder.runner?.run(),
    onSynced: () => synced(),
  });
  const loop = new SyncLoop(state, { planner, apply: parts.apply, log, clock: parts.clock });

  await source.start(state);
  if (options.once) {
    await listed;
    try {
      const outcome = await loop.sync();
      log.info(`synced ${state.services.size} service ports (${outcome.scriptBytes} bytes)`);
      return 0;
    } catch (err) {
      log.error(`sync failed: ${(err as Error).message}`);
      return 1;
    } finally {
      await source.stop();
    }
  }

  const runner = holder.runner = new BoundedFrequencyRunner(async () => {
    await loop.sync();
  }, {
    minIntervalMs: config.minSyncPeriodMs,
    maxIntervalMs: config.syncPeriodMs,
    clock: parts.clock ?? realClock,
    onError: (err) => log.error(`sync failed, will retry: ${(err as Error).message}`),
  });
  const aborted = new Promise<void>((resolve) => {
    if (options.signal?.aborted) resolve();
    options.signal?.addEventListener("abort", () => resolve(), { once: true });
  });
  await Promise.race([listed, aborted]);
  if (!options.signal?.aborted) {
    log.info("initial state listed, starting syncs");
    runner.start();
    await aborted;
  }
  log.info("shutting down; rules stay in the kernel");
  await runner.stop();
  await source.stop();
  return 0;
}
