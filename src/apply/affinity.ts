/**
 * Removing stale ClientIP affinity entries from the kernel after a sync (IPv4's shared
 * `affinity` map): list the map, keep entries whose endpoint is still a target of their entry
 * point, delete the rest in one transaction.
 *
 * @module
 */
import { NftApplyError, type NftRunnerOptions, runNft } from "./nft.ts";
import {
  deleteAffinityScript,
  parseAffinityListing,
  staleAffinityKeys,
} from "../render/nft/affinity.ts";
import { NAMES } from "../render/nft/names.ts";

/** What the clean-up needs from the planner. */
export interface AffinityTargets {
  affinityTargets(): Map<string, Set<string>>;
}

/**
 * Deletes affinity entries pointing at endpoints their service no longer has; returns how
 * many were deleted. An entry can expire between the listing and the delete (which then fails
 * as a whole), so a refused delete is retried once from a fresh listing.
 */
export async function cleanStaleAffinity(
  planner: AffinityTargets,
  options: NftRunnerOptions & { table: string },
): Promise<number> {
  for (let attempt = 0;; attempt++) {
    const listed = await runNft(
      ["-j", "list", "map", "ip", options.table, NAMES.affinity],
      options,
    );
    if (listed.code !== 0) return 0; // no table yet, or no IPv4: nothing to clean
    const stale = staleAffinityKeys(parseAffinityListing(listed.stdout), planner.affinityTargets());
    if (stale.length === 0) return 0;
    const result = await runNft(["-f", "-"], {
      ...options,
      stdin: deleteAffinityScript(options.table, stale),
    });
    if (result.code === 0) return stale.length;
    if (attempt > 0) {
      throw new NftApplyError(`cannot delete stale affinity entries: ${result.stderr.trim()}`, {
        line: 0,
        scriptLine: "",
        stderr: result.stderr,
      });
    }
  }
}
