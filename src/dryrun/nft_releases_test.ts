/**
 * The dry run's reading of real nft listings, release by release: the same synced tables
 * (tests/fixtures/nft/, captured by tests/compat/capture_fixtures.ts) as listed by Debian 12's
 * nft 1.0.6, by Debian 13's nft 1.1.3 in a minimal root (no /etc/protocols: protocols printed
 * as numbers), and by 1.1.3 with /etc/protocols.
 */
import assert from "node:assert/strict";
import { diffTables } from "./table_diff.ts";
import {
  elementImage,
  type TableImage,
  tablesFromListing,
  tablesFromScript,
} from "./table_image.ts";

const FIXTURES = new URL("../../tests/fixtures/nft/", import.meta.url);
const RELEASES = ["1.0.6", "1.1.3", "1.1.3-protocols"];

function listing(release: string): Map<string, TableImage> {
  const text = ["ip", "ip6"]
    .map((family) =>
      Deno.readTextFileSync(new URL(`${release}/list-table-${family}.nft`, FIXTURES))
    )
    .join("");
  return tablesFromListing(text);
}

/** What the proxy sent for that cluster (its dry run against an empty namespace). */
function wanted(): Map<string, TableImage> {
  return tablesFromScript(Deno.readTextFileSync(new URL("semantics-cluster.nft", FIXTURES)));
}

/** Every normalised form of the tables, elements of dynamic sets (the kernel's) left out. */
function normalised(tables: Map<string, TableImage>): unknown {
  return [...tables.values()].map((t) => ({
    table: `${t.family} ${t.name} ${t.comment}`,
    sets: [...t.sets.values()].map((s) => ({
      set: `${s.name}: ${s.same}`,
      elements: s.dynamic ? [] : [...s.elements.values()].map((e) => e.same).sort(),
    })),
    chains: [...t.chains.values()].map((c) => ({
      chain: `${c.name}: ${c.same}`,
      rules: c.rules.map((r) => r.same),
    })),
  }));
}

for (const release of RELEASES) {
  Deno.test(`tablesFromListing() reads nft ${release}'s listing of a synced table as no change`, () => {
    const diff = diffTables(listing(release), wanted());
    assert.deepEqual(diff.tables.map((t) => `${t.family} ${t.state}`), [
      "ip unchanged",
      "ip6 unchanged",
    ]);
    assert.equal(diff.script, "");
  });

  Deno.test(`diffTables() names protocols in deletes as scripts do, from nft ${release}`, () => {
    const target = wanted();
    const ip = target.get("ip kube-nftproxy")!;
    assert.ok(ip.sets.get("service-ips")!.elements.delete("10.96.0.30 . sctp . 90"));
    assert.ok(ip.sets.get("service-nodeports")!.elements.delete("tcp . 30083"));
    const diff = diffTables(listing(release), target);
    assert.equal(
      diff.script,
      "delete element ip kube-nftproxy service-ips { 10.96.0.30 . sctp . 90 }\n" +
        "delete element ip kube-nftproxy service-nodeports { tcp . 30083 }\n",
    );
  });
}

Deno.test("tablesFromListing() reads the same tables from nft 1.0.6 and 1.1.3", () => {
  const [first, ...others] = RELEASES.map((r) => normalised(listing(r)));
  for (const other of others) assert.deepEqual(other, first);
});

Deno.test("elementImage() names protocol components where its set's type holds protocols", () => {
  const typed = { key: [1], value: [] };
  assert.equal(
    elementImage("10.96.0.10 . 17 . 80 . 2", typed).keyText,
    "10.96.0.10 . udp . 80 . 2",
  );
  assert.equal(elementImage("6 . 30080", { key: [0], value: [] }).key, "tcp . 30080");
  // A number elsewhere is left alone: port 6, index 6.
  assert.equal(elementImage("10.96.0.10 . 6 . 6 . 6", typed).key, "10.96.0.10 . tcp . 6 . 6");
  assert.equal(elementImage("10.96.0.10 . 6 . 80").key, "10.96.0.10 . 6 . 80");
});

Deno.test("tablesFromListing() reads protocol numbers in rules as names", () => {
  const rules = (body: string) =>
    tablesFromListing(`table ip t {\n\tchain c {\n${body}\n\t}\n}\n`).get("ip t")!.chains.get("c")!
      .rules.map((r) => r.same);
  const script = tablesFromScript(
    "add table ip t\nadd chain ip t c\n" +
      "add rule ip t c meta l4proto tcp ct status dnat jump x\n" +
      "add rule ip t c meta l4proto != udp drop\n" +
      "add rule ip t c meta l4proto { tcp, sctp } accept\n" +
      "add rule ip t c ip protocol sctp th dport 6 accept\n",
  ).get("ip t")!.chains.get("c")!.rules.map((r) => r.same);
  assert.deepEqual(
    rules(
      "\t\tmeta l4proto 6 ct status dnat jump x\n\t\tmeta l4proto != 17 drop\n" +
        "\t\tmeta l4proto { 6, 132 } accept\n\t\tip protocol 132 th dport 6 accept",
    ),
    script,
  );
});
