import assert from "node:assert/strict";
import fc from "fast-check";
import { ELEMENT_SEPARATOR, type ElementGroup, type Fragment } from "./fragment.ts";
import { TableInForce } from "./in_force.ts";
import { inForce, ownersOf } from "./ownership.ts";
import { type ElementRun, Transaction } from "./transaction.ts";

/** What a full plan wrote before {@link TableInForce}: every owner recorded, then the winners. */
function writtenFromOwners(fragments: Map<string, Fragment>): { chains: string; script: string } {
  const { chains, elements } = ownersOf(fragments);
  const tx = new Transaction("ip", "t");
  const order = new Set<string>();
  for (const fragment of fragments.values()) fragment.elements.forEach((g) => order.add(g.set));
  for (const set of order) {
    const keyed = elements.keyed.get(set);
    if (keyed !== undefined) {
      const lines: string[] = [];
      keyed.forEachActive((_, line) => lines.push(line));
      tx.addElementLines(set, lines);
      continue;
    }
    const index = elements.entries.get(set)!;
    const runs: ElementRun[] = [];
    index.forEachActive((entry, first, shared) => {
      if (!shared) runs.push(first);
      else {
        const lines = inForce(index.valuesOf(entry));
        runs.push({ text: lines.join(ELEMENT_SEPARATOR), count: lines.length });
      }
    });
    tx.addElementRuns(set, runs);
  }
  const written = [...chains.active()].map(([name, rules]) => `${name}: ${rules.join("; ")}`);
  return { chains: written.join("\n"), script: tx.toString() };
}

function written(fragments: Map<string, Fragment>): { chains: string; script: string } {
  const table = new TableInForce();
  for (const [owner, fragment] of fragments) table.add(owner, fragment);
  const tx = new Transaction("ip", "t");
  table.writeElements(tx);
  const chains = [...table.chains].map(([name, { rules }]) => `${name}: ${rules.join("; ")}`);
  return { chains: chains.join("\n"), script: tx.toString() };
}

/** A fragment drawn from small pools, so owners often want the same keys and chains. */
const fragment: fc.Arbitrary<Fragment> = fc.record({
  chains: fc.uniqueArray(fc.tuple(fc.constantFrom("lb-1", "lb-2", "ext"), fc.nat(2)), {
    selector: ([name]) => name,
    maxLength: 2,
  }),
  keyed: fc.uniqueArray(fc.tuple(fc.constantFrom("k1", "k2", "k3"), fc.nat(2)), {
    selector: ([key]) => key,
    maxLength: 3,
  }),
  entries: fc.uniqueArray(fc.tuple(fc.constantFrom("e1", "e2"), fc.integer({ min: 1, max: 3 })), {
    selector: ([entry]) => entry,
    maxLength: 2,
  }),
  seed: fc.nat(9),
}).map(({ chains, keyed, entries, seed }) => {
  const elements: ElementGroup[] = [];
  if (keyed.length > 0) {
    elements.push({
      set: "ips",
      keys: keyed.map(([key]) => key),
      lines: keyed.map(([key, v]) => `${key} : v${v}`),
    });
  }
  for (const [entry, count] of entries) {
    const lines = Array.from({ length: count }, (_, i) => `${entry} . ${i} : ep${seed}-${i}`);
    elements.push({ set: "endpoints", entry, count, text: lines.join(ELEMENT_SEPARATOR) });
  }
  return {
    chains: new Map(chains.map(([name, v]) => [name, [`rule ${name} ${v}`]])),
    elements,
  };
});

Deno.test("TableInForce writes the elements and chains of the owners in force, in the order first seen, as recording every owner does", () => {
  fc.assert(fc.property(
    fc.uniqueArray(fc.tuple(fc.constantFrom("a", "b", "c", "d", "e"), fragment), {
      selector: ([owner]) => owner,
    }),
    (owned) => {
      const fragments = new Map(owned);
      assert.deepEqual(written(fragments), writtenFromOwners(fragments));
    },
  ));
});

Deno.test("TableInForce gives a key claimed twice the smallest owner's value, where the first claimant put it", () => {
  const table = new TableInForce();
  const claim = (value: string): Fragment => ({
    chains: new Map(),
    elements: [{ set: "service-ips", keys: ["10.0.0.1 . tcp . 80"], lines: [value] }],
  });
  table.add("default/web:http", claim("10.0.0.1 . tcp . 80 : goto lb-tcp-1"));
  table.add("default/api:http", claim("10.0.0.1 . tcp . 80 : goto lb-tcp-2"));
  const tx = new Transaction("ip", "t");
  table.writeElements(tx);
  assert.equal(
    tx.toString(),
    "add element ip t service-ips { 10.0.0.1 . tcp . 80 : goto lb-tcp-2 }\n",
  );
});
