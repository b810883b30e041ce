import assert from "node:assert/strict";
import {
  armScript,
  disarmScript,
  ownerComment,
  ownerLive,
  ownerOf,
  type TraceOwner,
} from "./table.ts";

const OWNER: TraceOwner = {
  pid: 4242,
  start: "987654",
  pidns: "pid:[4026531836]",
  until: 1800000000,
};

Deno.test("armScript() traces only new connections matching the selector, rate-limited", () => {
  assert.equal(
    armScript("kube-nftproxy", { to: "10.96.0.10", port: 80, protocol: "tcp" }, OWNER),
    `create table inet kube-nftproxy-trace { comment "${ownerComment(OWNER)}"; }\n` +
      "add chain inet kube-nftproxy-trace prerouting { type filter hook prerouting priority -199; policy accept; }\n" +
      "add rule inet kube-nftproxy-trace prerouting ct state new ip daddr 10.96.0.10 meta l4proto tcp th dport 80 limit rate 20/second burst 20 packets meta nftrace set 1\n" +
      "add chain inet kube-nftproxy-trace output { type filter hook output priority -199; policy accept; }\n" +
      "add rule inet kube-nftproxy-trace output ct state new ip daddr 10.96.0.10 meta l4proto tcp th dport 80 limit rate 20/second burst 20 packets meta nftrace set 1\n",
  );
});

Deno.test("armScript() with only --from traces that source's family, never accepts or drops", () => {
  const script = armScript("kube-nftproxy", { from: "fd00:77::/64" }, OWNER);
  assert.match(script, /ct state new ip6 saddr fd00:77::\/64 limit rate/);
  assert.doesNotMatch(script, / ip saddr /);
  assert.doesNotMatch(script, /\b(accept|drop|reject|dnat|snat|masquerade);?\s*$/m);
});

Deno.test("disarmScript() deletes the trace table, present or not", () => {
  assert.equal(
    disarmScript("kube-nftproxy"),
    "add table inet kube-nftproxy-trace\ndelete table inet kube-nftproxy-trace\n",
  );
});

Deno.test("ownerOf() reads back the owner the comment records", () => {
  const listing = `table inet kube-nftproxy-trace { # handle 7\n\tcomment "${
    ownerComment(OWNER)
  }"\n}`;
  assert.deepEqual(ownerOf(listing), OWNER);
  assert.equal(ownerOf("table inet kube-nftproxy-trace { # handle 7\n}"), null);
});

Deno.test("ownerLive(): a trace is live while its process runs, seen from its pid namespace", () => {
  const here = { pidns: OWNER.pidns, nowSeconds: OWNER.until + 1000 };
  assert.equal(ownerLive(OWNER, { ...here, startOf: OWNER.start }), true);
  assert.equal(ownerLive(OWNER, { ...here, startOf: null }), false, "the process is gone");
  assert.equal(ownerLive(OWNER, { ...here, startOf: "1" }), false, "its pid was reused");
  assert.equal(ownerLive(null, { ...here, startOf: OWNER.start }), false, "no owner recorded");
});

Deno.test("ownerLive(): from another pid namespace, until its timeout is over", () => {
  const elsewhere = { pidns: "pid:[1]", startOf: null };
  assert.equal(ownerLive(OWNER, { ...elsewhere, nowSeconds: OWNER.until - 1 }), true);
  assert.equal(ownerLive(OWNER, { ...elsewhere, nowSeconds: OWNER.until + 1 }), false);
});
