/**
 * This node's interface addresses, read with `ip -j address show`: what CIDR
 * `nodePortAddresses` select from (upstream reads them on every sync too).
 *
 * @module
 */
import { parseAddress } from "../model/ip.ts";

/** Where to read addresses. */
export interface AddressOptions {
  /** Read inside this network namespace (`ip -n NS`); for tests. */
  netns?: string;
}

/** The global-scope-or-host addresses of every interface, canonical, in interface order. */
export function parseIpAddressJson(text: string): string[] {
  const links: unknown = JSON.parse(text);
  if (!Array.isArray(links)) throw new Error("ip -j address show: expected a JSON array");
  const addresses: string[] = [];
  for (const link of links) {
    const infos = (link as { addr_info?: unknown }).addr_info;
    if (!Array.isArray(infos)) continue;
    for (const info of infos) {
      const { local, scope } = info as { local?: unknown; scope?: unknown };
      if (scope === "link") continue; // link-local addresses never accept node ports
      const parsed = parseAddress(local);
      if (parsed.ok) addresses.push(parsed.address);
    }
  }
  return addresses;
}

/** Lists this node's addresses; throws with `ip`'s stderr when it fails. */
export async function listLocalAddresses(options: AddressOptions = {}): Promise<string[]> {
  const args = options.netns
    ? ["-n", options.netns, "-j", "address", "show"]
    : ["-j", "address", "show"];
  const out = await new Deno.Command("ip", { args, stdout: "piped", stderr: "piped" }).output();
  const decoder = new TextDecoder();
  if (!out.success) {
    throw new Error(`ip -j address show failed: ${decoder.decode(out.stderr).trim()}`);
  }
  return parseIpAddressJson(decoder.decode(out.stdout));
}
