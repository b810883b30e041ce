import assert from "node:assert/strict";
import { NftModel, NftModelError } from "./nft_model.ts";

const BASE = `add table ip t { comment "rules"; }
add map ip t service-ips { type ipv4_addr . inet_proto . inet_service : verdict; }
add set ip t cluster-ips { type ipv4_addr; }
add chain ip t services { type nat hook prerouting priority dstnat; policy accept; }
add chain ip t lb-2
add rule ip t services ip daddr . meta l4proto . th dport vmap @service-ips
add rule ip t lb-2 dnat ip to 10.244.1.1
add element ip t service-ips { 10.96.0.10 . tcp . 80 comment "default/web:http" : goto lb-2 }
add element ip t cluster-ips { 10.96.0.10 comment "default/web:http" }
`;

function model(script = BASE): NftModel {
  const m = new NftModel();
  m.apply(script);
  return m;
}

Deno.test("NftModel.apply() builds tables, chains with rules in order, sets and maps with elements", () => {
  const t = model().table("ip", "t");
  assert.equal(t.comment, "rules");
  assert.deepEqual(t.chains, ["services", "lb-2"]);
  assert.equal(
    t.chain("services")?.spec,
    "type nat hook prerouting priority dstnat; policy accept;",
  );
  assert.deepEqual(t.rules("lb-2"), ["dnat ip to 10.244.1.1"]);
  assert.deepEqual(t.sets, ["service-ips", "cluster-ips"]);
  assert.deepEqual(t.elements("service-ips"), [
    { key: "10.96.0.10 . tcp . 80", value: "goto lb-2", comment: "default/web:http" },
  ]);
  assert.equal(t.lookup("service-ips", "10.96.0.10 . tcp . 80"), "goto lb-2");
  assert.equal(t.lookup("cluster-ips", "10.96.0.10"), true);
  assert.equal(t.lookup("cluster-ips", "10.96.0.11"), undefined);
});

Deno.test("NftModel.apply() flushes and deletes, and re-adding what exists changes nothing", () => {
  const m = model();
  m.apply(`add table ip t { comment "rules"; }
add chain ip t lb-2
add set ip t cluster-ips { type ipv4_addr; }
add element ip t cluster-ips { 10.96.0.10 comment "another comment" }
add element ip t service-ips { 10.96.0.10 . tcp . 80 : goto lb-2 }
`);
  let t = m.table("ip", "t");
  assert.deepEqual(t.rules("lb-2"), ["dnat ip to 10.244.1.1"], "add chain keeps the rules");
  assert.equal(t.elements("cluster-ips")[0].comment, "default/web:http", "the first comment stays");
  m.apply(`delete element ip t service-ips { 10.96.0.10 . tcp . 80 }
flush chain ip t lb-2
delete chain ip t lb-2
flush set ip t cluster-ips
`);
  t = m.table("ip", "t");
  assert.deepEqual(t.chains, ["services"]);
  assert.deepEqual(t.elements("service-ips"), []);
  assert.deepEqual(t.elements("cluster-ips"), []);
  m.apply("delete table ip t\n");
  assert.deepEqual(m.tables(), []);
});

Deno.test("NftModel.apply() refuses what the kernel refuses, naming the line, and keeps the tables", () => {
  const refused: [string, RegExp][] = [
    ["add rule ip t missing accept", /no chain missing/],
    ["add rule ip t services jump nowhere", /no chain nowhere/],
    ["add rule ip t services ip daddr @nothing drop", /no set or map nothing/],
    ["add element ip t service-ips { 10.96.0.11 . tcp . 80 : goto nowhere }", /no chain nowhere/],
    ["add element ip t service-ips { 10.96.0.10 . tcp . 80 : drop }", /File exists/],
    ["add element ip t missing { 10.96.0.1 }", /no set or map missing/],
    ["delete element ip t cluster-ips { 10.96.0.99 }", /no element 10\.96\.0\.99/],
    ["delete chain ip t lb-2", /chain lb-2 has rules/],
    ["flush chain ip t lb-2\ndelete chain ip t lb-2", /chain lb-2 is used by map service-ips/],
    ["delete map ip t service-ips", /map service-ips is used by chain services/],
    ["add set ip t cluster-ips { type ipv6_addr; }", /another definition/],
    [
      "add chain ip t services { type filter hook input priority 0; policy accept; }",
      /another definition/,
    ],
    ["flush chain ip t missing", /no chain missing/],
    ["delete table ip other", /no such table/],
    ["add rule ip other c accept", /no such table/],
    ["replace rule ip t services handle 1 accept", /not a command/],
  ];
  for (const [script, reason] of refused) {
    const m = model();
    const before = m.dump();
    // A good command first: a refused transaction keeps none of it.
    assert.throws(
      () => m.apply(`add chain ip t fresh\n${script}\n`),
      (e: unknown) => e instanceof NftModelError && reason.test(e.message),
      script,
    );
    assert.equal(m.dump(), before, `${script} left something behind`);
  }
  const m = model();
  assert.throws(
    () => m.apply("add chain ip t fresh\n\nadd rule ip t fresh jump nowhere\n"),
    (e: unknown) => e instanceof NftModelError && e.line === 3,
  );
});

Deno.test("NftModel.dump() writes a script that rebuilds the same tables", () => {
  const m = model();
  const copy = new NftModel();
  copy.apply(m.dump());
  assert.equal(copy.dump(), m.dump());
  assert.deepEqual(
    copy.table("ip", "t").elements("service-ips"),
    m.table("ip", "t").elements("service-ips"),
  );
});
