/**
 * The nft expression that picks an endpoint's index for a new connection, one per
 * {@link EndpointScheduler}: the key part after `entry .` in a balancer's endpoint-map lookup.
 *
 * - `random`: `numgen random mod N`, upstream nftables mode's choice.
 * - `round-robin`: `numgen inc mod N`. The counter belongs to the rule, and balancer chains
 *   (`lb-<proto>-N`) are shared by every service with N endpoints, so the services of one shape
 *   take turns on one counter: each sequence of connections to one service still cycles
 *   through its endpoints evenly, interleaved with the others' (ipvs keeps a counter per
 *   virtual server).
 * - `source-hash`: `jhash <family> saddr mod N seed 0x0`: the same client address always gets
 *   the same index while N is unchanged. The seed is fixed so that the choice survives a
 *   restart (a missing seed is a random one per rule in the kernel).
 *
 * All three are 32-bit integers, so they look up the same `numgen`-typed endpoint maps.
 *
 * @module
 */
import type { EndpointScheduler } from "../../config/config.ts";
import type { NftFamily } from "./transaction.ts";

/** The fixed seed of `source-hash`: the mapping from client to endpoint is stable across runs. */
export const SOURCE_HASH_SEED = "0x0";

/**
 * The expression giving a new connection's endpoint index in `0 … count-1`.
 *
 * @example
 * ```ts
 * endpointPick("source-hash", "ip6", 3); // "jhash ip6 saddr mod 3 seed 0x0"
 * endpointPick("round-robin", "ip", 2); // "numgen inc mod 2"
 * ```
 */
export function endpointPick(
  scheduler: EndpointScheduler,
  family: NftFamily,
  count: number,
): string {
  switch (scheduler) {
    case "random":
      return `numgen random mod ${count}`;
    case "round-robin":
      return `numgen inc mod ${count}`;
    case "source-hash":
      return `jhash ${family} saddr mod ${count} seed ${SOURCE_HASH_SEED}`;
  }
}

/** Matches any {@link endpointPick} expression (for readers of rendered rules). */
export const ENDPOINT_PICK_PATTERN =
  /(?:numgen (?:random|inc)|jhash ip6? saddr) mod (\d+)(?: seed 0x[0-9a-f]+)?/;
