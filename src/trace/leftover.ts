/**
 * Removing a trace table a killed `trace` left behind — the daemon's full sync and every new
 * `trace` call {@link removeLeftoverTrace} — while never touching a trace that still runs.
 *
 * The table is deleted by its handle, read in the same listing as its owner: if a new `trace`
 * replaced the leftover meanwhile, the handle is gone and nothing is deleted.
 *
 * @module
 */
import { applyNft, type NftRunnerOptions, runNft, tableExists } from "../apply/nft.ts";
import { ownerAlive, ownerOf, traceTableName } from "./table.ts";

/** What {@link removeLeftoverTrace} found. */
export type LeftoverOutcome = "none" | "live" | "removed";

/**
 * Deletes `inet <table>-trace` when its owner is gone; "live" when a running `trace` owns it.
 * Cheap when there is none: one check-only probe ({@link tableExists}), whatever the size of
 * the other tables.
 */
export async function removeLeftoverTrace(
  table: string,
  options: NftRunnerOptions = {},
): Promise<LeftoverOutcome> {
  const name = traceTableName(table);
  if (!(await tableExists("inet", name, options))) return "none";
  const listing = await runNft(["-a", "list", "table", "inet", name], options);
  if (listing.code !== 0) return "none";
  if (await ownerAlive(ownerOf(listing.stdout))) return "live";
  const handle = /^table inet \S+ \{ # handle (\d+)/m.exec(listing.stdout)?.[1];
  if (handle === undefined) return "none";
  await applyNft(`delete table inet handle ${handle}\n`, options);
  return "removed";
}
