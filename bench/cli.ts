/**
 * Command-line helpers shared by the benchmark programs: typed integer and share parsing for
 * commander options, and the `--mix` list.
 *
 * @module
 */
import { InvalidArgumentError } from "@commander-js/extra-typings";
import type { ServiceMix } from "./cluster.ts";

/** A commander parser for an integer within `min`-`max`. */
export function integerIn(min: number, max: number): (value: string) => number {
  return (value) => {
    const n = Number(value);
    if (!/^\d+$/.test(value) || n < min || n > max) {
      throw new InvalidArgumentError(`must be an integer ${min}-${max}`);
    }
    return n;
  };
}

const MIX_KEYS: readonly (keyof ServiceMix)[] = [
  "nodePort",
  "loadBalancer",
  "externalIPs",
  "clientIPAffinity",
  "externalTrafficPolicyLocal",
  "internalTrafficPolicyLocal",
  "udp",
];

/**
 * Parses `nodePort=0.1,loadBalancer=0.05,…` into a {@link ServiceMix}; an empty string is the
 * default mix (ClusterIP only).
 *
 * @example
 * ```ts
 * parseMix("nodePort=0.1,udp=0.2"); // { nodePort: 0.1, udp: 0.2 }
 * ```
 */
export function parseMix(value: string): ServiceMix {
  const mix: ServiceMix = {};
  for (const part of value.split(",").map((p) => p.trim()).filter((p) => p !== "")) {
    const [key, share] = part.split("=");
    const n = Number(share);
    if (!MIX_KEYS.includes(key as keyof ServiceMix) || share === undefined || !(n >= 0 && n <= 1)) {
      throw new InvalidArgumentError(
        `cannot use ${JSON.stringify(part)}: expected KEY=SHARE with a share 0-1 and KEY one of ` +
          MIX_KEYS.join(", "),
      );
    }
    mix[key as keyof ServiceMix] = n;
  }
  return mix;
}
