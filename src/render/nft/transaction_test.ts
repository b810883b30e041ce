import assert from "node:assert/strict";
import fc from "fast-check";
import { Transaction } from "./transaction.ts";

Deno.test("Transaction.addElementRuns() writes the commands addElementLines() writes for the same elements", () => {
  fc.assert(fc.property(
    fc.array(fc.integer({ min: 1, max: 2500 }), { maxLength: 8 }),
    (counts) => {
      let next = 0;
      const runs = counts.map((count) => {
        const lines = Array.from({ length: count }, () => `10.0.0.1 . tcp . 80 . ${next++} : x`);
        return { lines, run: { text: lines.join(", "), count } };
      });
      const byRuns = new Transaction("ip", "t").addElementRuns("m", runs.map((r) => r.run));
      const byLines = new Transaction("ip", "t").addElementLines("m", runs.flatMap((r) => r.lines));
      assert.equal(byRuns.toString(), byLines.toString());
      assert.equal(byRuns.size, byLines.size);
    },
  ));
});

Deno.test("Transaction writes at most 1000 elements per command and ends every command in a newline", () => {
  const lines = Array.from({ length: 2001 }, (_, i) => `10.0.0.${i % 250} . ${i}`);
  const script = new Transaction("ip6", "t").addTable().addElementLines("s", lines).toString();
  const commands = script.split("\n");
  assert.equal(commands.pop(), "", "the script ends in a newline");
  assert.deepEqual(
    commands.map((c) => c.split(", ").length),
    [1, 1000, 1000, 1],
  );
  assert.ok(commands[1].startsWith("add element ip6 t s { 10.0.0.0 . 0, "));
});
