/**
 * The rules `explain` walks: every service port's fragment rendered by the nft renderer itself
 * (`renderServicePort` with the proxy's render options), indexed by set, key and chain so the
 * walk can look elements up the way the kernel would.
 *
 * @module
 */
import type { ServicePort } from "../model/service_port.ts";
import { ELEMENT_SEPARATOR, type Fragment } from "../render/nft/fragment.ts";
import type { NftRenderOptions } from "../render/nft/options.ts";
import { renderServicePort } from "../render/nft/service_fragment.ts";
import type { ExplainInput } from "./explain.ts";

/** Everything the rendered rules of one family hold, indexed for lookups. */
export interface RuleIndex {
  /** set → key → element (value and owning service port). */
  readonly elements: Map<string, Map<string, { value: string | null; port: ServicePort }>>;
  /** `map|entry` → endpoints in index order. */
  readonly entries: Map<string, { ip: string; port: number }[]>;
  readonly chains: Map<string, readonly string[]>;
}

/** The rules rendered from `input`, indexed. */
export function buildIndex(input: ExplainInput, options: NftRenderOptions): RuleIndex {
  const index: RuleIndex = { elements: new Map(), entries: new Map(), chains: new Map() };
  for (const [key, port] of input.services) {
    const fragment = renderServicePort(port, input.endpoints.get(key) ?? [], options);
    if (fragment !== null) addFragment(index, port, fragment);
  }
  return index;
}

function addFragment(index: RuleIndex, port: ServicePort, fragment: Fragment): void {
  for (const [name, rules] of fragment.chains) index.chains.set(name, rules);
  for (const group of fragment.elements) {
    if (group.entry !== undefined) {
      const endpoints = group.text.split(ELEMENT_SEPARATOR).map((line) => {
        const m = / : (\S+) \. (\d+)$/.exec(line);
        return { ip: m?.[1] ?? "", port: Number(m?.[2] ?? 0) };
      });
      index.entries.set(`${group.set}|${group.entry}`, endpoints);
      continue;
    }
    let set = index.elements.get(group.set);
    if (set === undefined) index.elements.set(group.set, set = new Map());
    group.keys.forEach((key, i) =>
      set.set(key, { value: elementValue(key, group.lines[i]), port })
    );
  }
}

/** The value of a formatted element (`key comment "…" : value`), or null for a set element. */
function elementValue(key: string, line: string): string | null {
  const rest = line.slice(key.length).replace(/^ comment "(?:[^"\\]|\\.)*"/, "");
  return rest.startsWith(" : ") ? rest.slice(3) : null;
}
