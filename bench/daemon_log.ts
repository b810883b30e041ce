/**
 * Reading the proxy daemon's log for the daemon benchmark: the first sync's phase timings and
 * the sync lines that say a transaction went to the kernel.
 *
 * Pure: lines in, records out.
 *
 * @module
 */

/** A sync the daemon logged (`synced fully: …` / `synced partially: …`, at `-v=1` or more). */
export interface SyncLine {
  /** Whether it was a full sync. */
  readonly full: boolean;
  /** Service ports the sync changed. */
  readonly servicePortsChanged: number;
  /** Bytes of script sent to the kernel. */
  readonly bytes: number;
  /** The sync's own duration as the daemon measured it, ms. */
  readonly durationMs: number;
}

const SYNC_LINE =
  /\bsynced (fully|partially): (\d+) service ports changed, (\d+) bytes sent, (\d+(?:\.\d+)?) ms/;

/**
 * The sync a daemon log line reports, or undefined for any other line.
 *
 * @example
 * ```ts
 * parseSyncLine("I 2026-11-25T10:00:00Z synced partially: 1 service ports changed, 312 bytes sent, 21 ms");
 * // { full: false, servicePortsChanged: 1, bytes: 312, durationMs: 21 }
 * ```
 */
export function parseSyncLine(line: string): SyncLine | undefined {
  const m = SYNC_LINE.exec(line);
  if (m === null) return undefined;
  return {
    full: m[1] === "fully",
    servicePortsChanged: Number(m[2]),
    bytes: Number(m[3]),
    durationMs: Number(m[4]),
  };
}

const PHASE_MARK = "first sync timing:";

/**
 * The phases of the daemon's first sync from its `first sync timing: startup=123 list=456 …`
 * line (milliseconds, any keys), or undefined for any other line. Pairs that are not
 * `key=number` are ignored.
 *
 * @example
 * ```ts
 * parsePhaseLine("I 2026-11-25T10:00:00Z first sync timing: startup=350 list=1700 apply=1200 total=3250");
 * // { startup: 350, list: 1700, apply: 1200, total: 3250 }
 * ```
 */
export function parsePhaseLine(line: string): Record<string, number> | undefined {
  const at = line.indexOf(PHASE_MARK);
  if (at < 0) return undefined;
  const phases: Record<string, number> = {};
  for (
    const m of line.slice(at + PHASE_MARK.length).matchAll(
      /([A-Za-z_][\w.-]*)=(-?\d+(?:\.\d+)?)(?:ms)?\b/g,
    )
  ) {
    phases[m[1]] = Number(m[2]);
  }
  return phases;
}
