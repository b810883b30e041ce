import assert from "node:assert/strict";
import { elementComment, parseChainHooks, parseConntrackEntry } from "./kernel_text.ts";

const CHAINS = await Deno.readTextFile(
  new URL("../../tests/fixtures/trace/list-chains.txt", import.meta.url),
);

Deno.test("parseChainHooks() gives the hook of every base chain, ours and others'", () => {
  const hooks = parseChainHooks(CHAINS);
  assert.equal(hooks.get("ip kube-nftproxy nat-prerouting"), "prerouting");
  assert.equal(hooks.get("ip6 kube-nftproxy filter-forward"), "forward");
  assert.equal(hooks.get("ip kube-nftproxy nat-postrouting"), "postrouting");
  assert.equal(hooks.get("inet knp-firewall pre"), "prerouting");
  assert.equal(hooks.get("ip kube-nftproxy services"), undefined, "a regular chain has no hook");
});

Deno.test("elementComment() reads our service port name from nft get element", () => {
  const listing = "table ip kube-nftproxy {\n\tmap service-ips {\n" +
    "\t\ttype ipv4_addr . inet_proto . inet_service : verdict\n\t\tcounter\n" +
    '\t\telements = { 10.96.0.10 . tcp . 80 counter packets 3 bytes 180 comment "default/web:http" : goto lb-tcp-3 }\n' +
    "\t}\n}\n";
  assert.equal(elementComment(listing), "default/web:http");
  assert.equal(elementComment("table ip kube-nftproxy {\n}\n"), null);
});

Deno.test("parseConntrackEntry() gives both directions: the reply's source is the endpoint", () => {
  const entry = parseConntrackEntry(
    "tcp      6 119 TIME_WAIT src=192.168.77.2 dst=10.96.0.10 sport=56556 dport=80 " +
      "src=10.244.1.12 dst=10.244.1.1 sport=8080 dport=21980 [ASSURED] mark=0 use=1\n",
  );
  assert.deepEqual(entry, {
    original: { src: "192.168.77.2", dst: "10.96.0.10", sport: 56556, dport: 80 },
    reply: { src: "10.244.1.12", dst: "10.244.1.1", sport: 8080, dport: 21980 },
  });
  assert.equal(parseConntrackEntry("conntrack v1.4.7 (conntrack-tools): 0 flow entries"), null);
});
