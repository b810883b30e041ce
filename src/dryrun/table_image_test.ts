import assert from "node:assert/strict";
import {
  elementImage,
  splitElements,
  tablesFromListing,
  tablesFromScript,
  TableTextError,
} from "./table_image.ts";
import { diffTables } from "./table_diff.ts";

/** A script as the renderer writes it. */
const SCRIPT = `add table ip t { comment "rules for kube-nftproxy"; }
add map ip t service-ips { type ipv4_addr . inet_proto . inet_service : verdict; counter; comment "dispatch"; }
add map ip t affinity { type ipv4_addr . inet_service : ipv4_addr; flags timeout,dynamic; timeout 10800s; comment "sticky"; }
add chain ip t filter-prerouting { type filter hook prerouting priority -110; policy accept; }
add chain ip t lb-tcp-2
add rule ip t filter-prerouting ct state new meta mark & 0x00004000 == 0 return
add rule ip t lb-tcp-2 dnat ip to ip daddr . meta l4proto . th dport . numgen random mod 2 map @eps
add element ip t service-ips { 10.96.0.10 . tcp . 80 comment "default/web:http" : goto lb-tcp-2 }
add table ip6 t
add set ip6 t cluster-ips { type ipv6_addr; }
add element ip6 t cluster-ips { fd00:10:96:0:0:0:0:a }
`;

/** What nft 1.0.6 lists after loading SCRIPT and seeing some traffic. */
const LISTING = `table ip t {
	comment "rules for kube-nftproxy"
	map service-ips {
		type ipv4_addr . inet_proto . inet_service : verdict
		counter
		comment "dispatch"
		elements = { 10.96.0.10 . tcp . 80 counter packets 7 bytes 420 comment "default/web:http" : goto lb-tcp-2 }
	}

	map affinity {
		type ipv4_addr . inet_service : ipv4_addr
		flags dynamic,timeout
		timeout 3h
		comment "sticky"
		elements = { 10.0.0.5 . 80 expires 2h59m58s : 10.244.1.11,
			     10.0.0.6 . 80 expires 2h : 10.244.1.12 }
	}

	chain filter-prerouting {
		type filter hook prerouting priority dstnat - 10; policy accept;
		ct state new meta mark & 0x00004000 == 0x00000000 return
	}

	chain lb-tcp-2 {
		dnat ip to ip daddr . meta l4proto . tcp dport . numgen random mod 2 map @eps
	}
}
table ip6 t {
	set cluster-ips {
		type ipv6_addr
		elements = { fd00:10:96::a }
	}
}
`;

Deno.test("tablesFromListing() reads nft's listing as the same tables the script wrote", () => {
  const diff = diffTables(tablesFromListing(LISTING), tablesFromScript(SCRIPT));
  assert.deepEqual(diff.tables.map((t) => `${t.family} ${t.state}`), [
    "ip unchanged",
    "ip6 unchanged",
  ]);
  assert.equal(diff.script, "");
});

Deno.test("tablesFromListing() keeps elements, rules and base-chain hooks", () => {
  const table = tablesFromListing(LISTING).get("ip t")!;
  assert.equal(table.comment, "rules for kube-nftproxy");
  assert.equal(table.sets.get("affinity")!.dynamic, true);
  assert.equal(table.sets.get("affinity")!.elements.size, 2);
  assert.deepEqual([...table.sets.get("service-ips")!.elements.keys()], ["10.96.0.10 . tcp . 80"]);
  assert.equal(
    table.chains.get("filter-prerouting")!.same,
    "type filter hook prerouting priority -110; policy accept",
  );
  assert.equal(table.chains.get("lb-tcp-2")!.rules.length, 1);
});

Deno.test("elementImage() separates key, comment and value whatever the comment holds", () => {
  const e = elementImage(
    '10.0.0.1 . tcp . 80 counter packets 1 bytes 60 comment "a : b counter x" : goto c',
  );
  assert.equal(e.key, "10.0.0.1 . tcp . 80");
  assert.equal(e.keyText, "10.0.0.1 . tcp . 80");
  assert.equal(e.same, '10.0.0.1 . tcp . 80 comment "a : b counter x" : goto c');
  assert.equal(elementImage("fd00:0:0:0:0:0:0:1/128 . 10.0.0.0/8").key, "fd00::1 . 10.0.0.0/8");
});

Deno.test("splitElements() splits on commas outside quoted comments", () => {
  assert.deepEqual(splitElements('a comment "x, y", b : c,\n d'), [
    'a comment "x, y"',
    "b : c",
    "d",
  ]);
});

Deno.test("tablesFromScript() names the line it cannot read", () => {
  assert.throws(
    () => tablesFromScript("add table ip t\nfrobnicate\n"),
    (err: unknown) =>
      err instanceof TableTextError && /line 2: not a command: frobnicate/.test(err.message),
  );
  assert.throws(() => tablesFromScript("add rule ip t c accept\n"), /line 1: no table ip t/);
});
