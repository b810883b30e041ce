import assert from "node:assert/strict";
import { parseTraceLine } from "./events.ts";

Deno.test("parseTraceLine() reads a packet line's connection, protocols named or numbered", () => {
  for (const protocol of ["tcp", "6"]) {
    const event = parseTraceLine(
      'trace id 8b748c05 inet kube-nftproxy-trace prerouting packet: iif "knp-cl0" ether saddr ' +
        "d6:1b:ee:56:bd:69 ether daddr 66:6f:8a:c2:33:1f ip saddr 192.168.77.2 ip daddr 10.96.0.10 " +
        `ip dscp cs0 ip ecn not-ect ip ttl 64 ip id 44338 ip protocol ${protocol} ip length 60 ` +
        "tcp sport 43974 tcp dport 80 tcp flags == syn tcp window 64240 ",
    );
    assert.deepEqual(event, {
      id: "8b748c05",
      family: "inet",
      table: "kube-nftproxy-trace",
      chain: "prerouting",
      kind: "packet",
      packet: {
        iif: "knp-cl0",
        saddr: "192.168.77.2",
        daddr: "10.96.0.10",
        protocol: "tcp",
        sport: 43974,
        dport: 80,
      },
    });
  }
});

Deno.test("parseTraceLine() reads an IPv6 packet", () => {
  const event = parseTraceLine(
    'trace id 1 ip6 kube-nftproxy nat-prerouting packet: iif "eth0" ip6 saddr fd00:77::2 ' +
      "ip6 daddr fd00:10:96::10 ip6 nexthdr 17 udp sport 5353 udp dport 53 udp length 20",
  );
  assert.equal(event?.kind, "packet");
  assert.deepEqual(event?.kind === "packet" ? event.packet : null, {
    iif: "eth0",
    saddr: "fd00:77::2",
    daddr: "fd00:10:96::10",
    protocol: "udp",
    sport: 5353,
    dport: 53,
  });
});

Deno.test("parseTraceLine() splits a rule from its verdict", () => {
  assert.deepEqual(
    parseTraceLine(
      "trace id 34742af9 ip kube-nftproxy services rule ip daddr . meta l4proto . th dport vmap " +
        "@service-ips (verdict goto lb-tcp-3)",
    ),
    {
      id: "34742af9",
      family: "ip",
      table: "kube-nftproxy",
      chain: "services",
      kind: "rule",
      rule: "ip daddr . meta l4proto . th dport vmap @service-ips",
      verdict: "goto lb-tcp-3",
    },
  );
});

Deno.test("parseTraceLine() reads a policy without the mark nft may print after it", () => {
  const event = parseTraceLine(
    "trace id 1 ip kube-nftproxy filter-prerouting-post-dnat policy accept meta mark 0x00004000",
  );
  assert.equal(event?.kind, "policy");
  assert.equal(event?.kind === "policy" ? event.verdict : "", "accept");
});

Deno.test("parseTraceLine() ignores what is not a trace event", () => {
  for (
    const line of ["", "trace id", "table ip kube-nftproxy {", "# new generation 7 by process 1"]
  ) {
    assert.equal(parseTraceLine(line), null, line);
  }
});
