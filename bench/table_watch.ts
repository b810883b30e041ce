/**
 * The daemon benchmark's witness of a first transaction: run inside the daemon's network
 * namespace, it asks the kernel over netlink every few milliseconds whether a table exists (one
 * get request, nothing else read: microseconds) and prints, as JSON lines, `{"ready":true}`
 * once it is polling, then `{"found":EPOCH_MS}` (`Date.now()` when the table was first seen)
 * and exits; or `{"timeout":true}` after the time limit.
 *
 * Why not `nft list tables` from the benchmark: every poll is a process (`ip netns exec nft`,
 * ~10 ms of CPU), some 60 a second, taking a share of a 2-core machine from the daemon it
 * measures (its first sync at 10k × 10 from a file: ~0.14 s later with such a poller running);
 * and a listing that overlaps the commit reads the whole new table (nft 1.0.6 fetches every
 * element), so the stamp could be late by the listing.
 *
 * @example
 * ```sh
 * ip netns exec NS deno run --allow-ffi bench/table_watch.ts ip kube-nftproxy 180000
 * ```
 *
 * @module
 */
import { tableExists } from "../src/apply/nft_netlink.ts";

/** Pause between two questions, ms. */
const INTERVAL_MS = 3;

if (import.meta.main) {
  const [family, table, timeout] = Deno.args;
  const deadline = Date.now() + Number(timeout);
  console.log(JSON.stringify({ ready: true }));
  let found: number | undefined;
  while (found === undefined && Date.now() < deadline) {
    if (await tableExists(family, table)) found = Date.now();
    else await new Promise((resolve) => setTimeout(resolve, INTERVAL_MS));
  }
  console.log(JSON.stringify(found === undefined ? { timeout: true } : { found }));
}
