import assert from "node:assert/strict";
import { diffTables } from "./table_diff.ts";
import { tablesFromListing, tablesFromScript } from "./table_image.ts";
import { kernelGate, withScratch } from "../../tests/nft_scratch.ts";
import { listTables, tableText } from "../../tests/property/cluster.ts";

/** A table as the proxy renders it: one service with two endpoints. */
const BEFORE = `add table ip t { comment "rules"; }
add map ip t service-ips { type ipv4_addr . inet_proto . inet_service : verdict; }
add map ip t eps { type ipv4_addr . inet_proto . inet_service . inet_service : ipv4_addr; }
add map ip t affinity { type ipv4_addr : ipv4_addr; flags dynamic,timeout; timeout 60s; }
add chain ip t services { type nat hook prerouting priority dstnat; policy accept; }
add chain ip t lb-2
add rule ip t services ip daddr . meta l4proto . th dport vmap @service-ips
add rule ip t lb-2 dnat ip to ip daddr . meta l4proto . th dport . numgen random mod 2 map @eps
add element ip t service-ips { 10.96.0.10 . tcp . 80 comment "default/web:http" : goto lb-2 }
add element ip t eps { 10.96.0.10 . tcp . 80 . 0 : 10.244.1.11, 10.96.0.10 . tcp . 80 . 1 : 10.244.1.12 }
add element ip t affinity { 10.0.0.5 : 10.244.1.11 }
`;

function diff(before: string | null, after: string) {
  return diffTables(
    before === null ? new Map() : tablesFromScript(before),
    tablesFromScript(after),
  );
}

Deno.test("diffTables() changes nothing when the kernel already has the wanted table", () => {
  const d = diff(BEFORE, BEFORE);
  assert.equal(d.tables[0].state, "unchanged");
  assert.equal(d.script, "");
});

Deno.test("diffTables() creates the whole table when the kernel has none", () => {
  const d = diff(null, BEFORE);
  assert.equal(d.tables[0].state, "created");
  assert.match(d.script, /^add table ip t \{ comment "rules"; \}\n/);
  assert.equal(d.tables[0].counts.elementsAdded, 3, "the dynamic set's elements are not ours");
  assert.equal(d.tables[0].counts.chainsAdded, 2);
});

Deno.test("diffTables() adds just the element of a new endpoint", () => {
  const after = BEFORE.replace(
    ": 10.244.1.12 }",
    ": 10.244.1.12, 10.96.0.10 . tcp . 80 . 2 : 10.244.1.13 }",
  );
  const d = diff(BEFORE, after);
  assert.equal(d.tables[0].state, "changed");
  assert.equal(d.script, "add element ip t eps { 10.96.0.10 . tcp . 80 . 2 : 10.244.1.13 }\n");
});

Deno.test("diffTables() replaces a changed element, rewrites a changed chain and drops an unused one", () => {
  const after = BEFORE
    .replace("add chain ip t lb-2\n", "add chain ip t lb-1\n")
    .replace(
      /add rule ip t lb-2 .*\n/,
      "add rule ip t lb-1 dnat ip to ip daddr . meta l4proto . th dport . numgen random mod 1 map @eps\n",
    )
    .replace("goto lb-2", "goto lb-1")
    .replace(", 10.96.0.10 . tcp . 80 . 1 : 10.244.1.12", "");
  assert.deepEqual(diff(BEFORE, after).script.split("\n"), [
    "add chain ip t lb-1",
    "add rule ip t lb-1 dnat ip to ip daddr . meta l4proto . th dport . numgen random mod 1 map @eps",
    "delete element ip t service-ips { 10.96.0.10 . tcp . 80 }",
    "delete element ip t eps { 10.96.0.10 . tcp . 80 . 1 }",
    'add element ip t service-ips { 10.96.0.10 . tcp . 80 comment "default/web:http" : goto lb-1 }',
    "flush chain ip t lb-2",
    "delete chain ip t lb-2",
    "",
  ]);
});

Deno.test("diffTables() flushes and refills a chain whose rules changed", () => {
  const after = BEFORE.replace(
    "add rule ip t services ",
    "add rule ip t services meta l4proto tcp ",
  );
  const d = diff(BEFORE, after);
  assert.equal(d.tables[0].counts.chainsRewritten, 1);
  assert.match(d.script, /^flush chain ip t services\nadd rule ip t services meta l4proto tcp /);
});

Deno.test("diffTables() recreates the table, saying why, when a set's definition changes", () => {
  const after = BEFORE.replace(
    "flags dynamic,timeout; timeout 60s;",
    "flags dynamic,timeout; timeout 120s;",
  );
  const d = diff(BEFORE, after);
  assert.equal(d.tables[0].state, "recreated");
  assert.match(
    d.tables[0].reason!,
    /map affinity changes its definition .*timeout 60s.*timeout 120s/,
  );
  assert.match(
    d.script,
    /^add table ip t \{ comment "rules"; \}\ndelete table ip t\nadd table ip t/,
  );
});

Deno.test("diffTables() deletes sets and chains the proxy no longer wants, after their users", () => {
  const after = BEFORE.split("\n").filter((l) => !/ (eps|lb-2)\b/.test(l)).join("\n")
    .replace(" : goto lb-2", " : accept");
  const d = diff(BEFORE, after);
  const lines = d.script.trimEnd().split("\n");
  assert.deepEqual(lines.slice(-3), [
    "flush chain ip t lb-2",
    "delete chain ip t lb-2",
    "delete map ip t eps",
  ]);
});

/** BEFORE in the proxy's real layout, which the kernel takes (its endpoint map typed as ours). */
const KERNEL_BEFORE = BEFORE.replace(
  "add map ip t eps { type ipv4_addr . inet_proto . inet_service . inet_service : ipv4_addr; }",
  "add map ip t eps { typeof ip daddr . meta l4proto . th dport . numgen random mod 1 : ip daddr . tcp dport; }",
).replace(
  "10.96.0.10 . tcp . 80 . 0 : 10.244.1.11, 10.96.0.10 . tcp . 80 . 1 : 10.244.1.12 }",
  "10.96.0.10 . tcp . 80 . 0 : 10.244.1.11 . 8080, 10.96.0.10 . tcp . 80 . 1 : 10.244.1.12 . 8080 }",
);

Deno.test({
  name:
    "diffTables()' script, applied to the kernel's table as listed, leaves exactly the wanted table",
  ignore: kernelGate.ignore,
  fn: () =>
    withScratch((kernel) =>
      withScratch(async (fresh) => {
        const after = KERNEL_BEFORE.replace("10.244.1.12 . 8080", "10.244.1.99 . 8080").replace(
          "add chain ip t lb-2\n",
          "add chain ip t lb-2\nadd chain ip t spare\n",
        );
        assert.notEqual(after, KERNEL_BEFORE);
        await kernel.load(KERNEL_BEFORE);
        const listed = async () => tablesFromListing(await kernel.list("ip", "t"));
        const d = diffTables(await listed(), tablesFromScript(after));
        assert.equal(d.tables[0].state, "changed");
        await kernel.load(d.script);
        // The kernel now holds what a fresh load of the wanted script builds (the packet
        // path's affinity entries, which a diff leaves alone, aside: they carry expiry times)...
        await fresh.load(after);
        const options = { ignoreProtocolDependency: true };
        const without = { without: new Set(["map affinity"]) };
        assert.equal(
          tableText((await listTables(kernel.ns, options)).get("ip t"), without),
          tableText((await listTables(fresh.ns, options)).get("ip t"), without),
        );
        assert.match(await kernel.list("ip", "t"), /10\.0\.0\.5 (expires \S+ )?: 10\.244\.1\.11/);
        // ...and a diff against it, as listed again, is empty.
        assert.equal(diffTables(await listed(), tablesFromScript(after)).script, "");
      })
    ),
});
