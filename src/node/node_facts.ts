/**
 * What the proxy knows of the node it runs on besides its Node object: the addresses on its
 * interfaces and the IP families its kernel lets the proxy program. The runner reads the
 * addresses before every sync (CIDR `nodePortAddresses` select node-port addresses from them)
 * and hands the same reading to the health-check ports, which bind to them; the families are
 * asked once at start-up, through the back end's probe, and decide what every planner, check
 * and counter of the back end covers.
 *
 * @module
 */
import type { IPFamily } from "../model/service_port.ts";

/** Every family, in the usual order: what is programmed when the kernel cannot be asked. */
export const ALL_FAMILIES: readonly IPFamily[] = ["IPv4", "IPv6"];

/** What the kernel answered a back end's probe. */
export interface KernelFamilies {
  /** Families to program, IPv4 first. */
  readonly usable: readonly IPFamily[];
  /** One warning per family the kernel refused, in the back end's own words. */
  readonly warnings: readonly string[];
}

/** This node's facts. */
export interface NodeFacts {
  /** The IP families to program (IPv4 first). */
  readonly families: readonly IPFamily[];
  /** This node's interface addresses now, or undefined when they cannot be read. */
  localAddresses(): readonly string[] | undefined;
}

/** Options of {@link readNodeFacts}. */
export interface ReadNodeFactsOptions {
  /** Asks the kernel which families it takes (the back end's `probeFamilies`). */
  readonly probe: () => Promise<KernelFamilies>;
  /** Receives one line per family the kernel refuses. */
  readonly warn: (line: string) => void;
  /**
   * When the kernel cannot be asked (no root, away from a node: a dry run), take
   * {@link ALL_FAMILIES} instead of throwing. Default false: the probe's error (e.g.
   * `NoIPv4Error`) is thrown.
   */
  readonly allFamiliesOnError?: boolean;
  /** Reads the interface addresses. Default {@link localInterfaceAddresses}. */
  readonly localAddresses?: () => readonly string[] | undefined;
}

/**
 * Asks the kernel which families to program (warning about each refused one) and returns the
 * node's facts.
 *
 * @example
 * ```ts
 * const node = await readNodeFacts({ probe: () => backend.probeFamilies(), warn: log.warn });
 * const proxier = await backend.proxier(node.families);
 * ```
 */
export async function readNodeFacts(options: ReadNodeFactsOptions): Promise<NodeFacts> {
  let families: readonly IPFamily[];
  try {
    const answer = await options.probe();
    answer.warnings.forEach((line) => options.warn(line));
    families = answer.usable;
  } catch (err) {
    if (!options.allFamiliesOnError) throw err;
    families = ALL_FAMILIES;
  }
  return { families, localAddresses: options.localAddresses ?? localInterfaceAddresses };
}

/**
 * The addresses of this host's interfaces (in the current network namespace), or undefined
 * when they cannot be read.
 */
export function localInterfaceAddresses(): string[] | undefined {
  try {
    return Deno.networkInterfaces().map((i) => i.address.replace(/%.*$/, ""));
  } catch {
    return undefined;
  }
}
