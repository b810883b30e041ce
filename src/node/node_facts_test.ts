import assert from "node:assert/strict";
import { NoIPv4Error } from "../apply/families.ts";
import { ALL_FAMILIES, readNodeFacts } from "./node_facts.ts";

Deno.test("readNodeFacts() programs the families the probe allows and passes its warnings on", async () => {
  const warned: string[] = [];
  const node = await readNodeFacts({
    probe: () => Promise.resolve({ usable: ["IPv4"], warnings: ["no ip6 here"] }),
    warn: (line) => warned.push(line),
    localAddresses: () => ["192.168.77.1"],
  });
  assert.deepEqual(node.families, ["IPv4"]);
  assert.deepEqual(node.localAddresses(), ["192.168.77.1"]);
  assert.deepEqual(warned, ["no ip6 here"]);
});

Deno.test("readNodeFacts() throws the probe's error, or takes every family when asked to (a dry run)", async () => {
  const probe = () => Promise.reject(new NoIPv4Error("refused"));
  await assert.rejects(readNodeFacts({ probe, warn: assert.fail }), NoIPv4Error);
  const node = await readNodeFacts({ probe, warn: assert.fail, allFamiliesOnError: true });
  assert.deepEqual(node.families, ALL_FAMILIES);
});
