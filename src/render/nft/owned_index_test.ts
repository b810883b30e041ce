import assert from "node:assert/strict";
import fc from "fast-check";
import { OwnedIndex } from "./owned_index.ts";

Deno.test("OwnedIndex keeps the first owner's value in force until it leaves", () => {
  const index = new OwnedIndex<string>();
  index.add("lb-tcp-3", "a", "rules-a");
  index.add("lb-tcp-3", "b", "rules-b");
  assert.equal(index.get("lb-tcp-3"), "rules-a");
  index.remove("lb-tcp-3", "a");
  assert.equal(index.get("lb-tcp-3"), "rules-b");
  index.remove("lb-tcp-3", "b");
  assert.equal(index.has("lb-tcp-3"), false);
});

Deno.test("OwnedIndex.after() predicts exactly what apply() does", () => {
  const owner = fc.constantFrom("a", "b", "c", "d");
  fc.assert(fc.property(
    fc.array(fc.tuple(owner, fc.nat(3))),
    fc.uniqueArray(owner),
    fc.array(fc.tuple(owner, fc.nat(3))),
    (initial, removed, added) => {
      const index = new OwnedIndex<number>();
      for (const [o, v] of initial) index.add("x", o, v);
      const changes = { removed: new Set(removed), added: new Map(added) };
      const predicted = index.after("x", changes);
      index.apply("x", changes);
      assert.equal(index.get("x"), predicted);
    },
  ));
});

Deno.test("OwnedIndex.forEachActive() reports each id once, with its value in force and whether others want it", () => {
  const index = new OwnedIndex<string>();
  index.add("lb-tcp-3", "b", "rules-b");
  index.add("external-x", "c", "rules-c");
  index.add("lb-tcp-3", "a", "rules-a");
  const seen: [string, string, boolean][] = [];
  index.forEachActive((id, value, shared) => seen.push([id, value, shared]));
  assert.deepEqual(seen, [["lb-tcp-3", "rules-a", true], ["external-x", "rules-c", false]]);
  index.remove("lb-tcp-3", "b");
  seen.length = 0;
  index.forEachActive((id, value, shared) => seen.push([id, value, shared]));
  assert.deepEqual(seen, [["lb-tcp-3", "rules-a", false], ["external-x", "rules-c", false]]);
});
