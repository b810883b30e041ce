/**
 * Specs of the conntrack output parser (pure; no namespace needed).
 *
 * @module
 */

import assert from "node:assert/strict";
import { matchesFilter, parseConntrackLine } from "./conntrack.ts";

Deno.test("parseConntrackLine() reads an extended TCP entry", () => {
  const line = "ipv4     2 tcp      6 119 TIME_WAIT src=192.168.77.2 dst=10.96.0.10 sport=47340 " +
    "dport=80 src=10.244.1.11 dst=192.168.77.2 sport=8080 dport=47340 [ASSURED] mark=16384 use=1";
  assert.deepEqual(parseConntrackLine(line), {
    family: "ipv4",
    proto: "tcp",
    timeout: 119,
    state: "TIME_WAIT",
    orig: { src: "192.168.77.2", dst: "10.96.0.10", sport: 47340, dport: 80 },
    reply: { src: "10.244.1.11", dst: "192.168.77.2", sport: 8080, dport: 47340 },
    flags: ["ASSURED"],
    mark: 16384,
  });
});

Deno.test("parseConntrackLine() reads NEW and DESTROY events, plain and extended", () => {
  const created = parseConntrackLine(
    "    [NEW] ipv6     10 udp      17 30 src=fd00:77::2 dst=fd00:10:244:1::11 sport=50636 " +
      "dport=8080 [UNREPLIED] src=fd00:10:244:1::11 dst=fd00:77::2 sport=8080 dport=50636",
  );
  assert.equal(created?.event, "NEW");
  assert.equal(created?.family, "ipv6");
  assert.equal(created?.state, undefined);
  assert.deepEqual(created?.flags, ["UNREPLIED"]);
  assert.equal(created?.reply.src, "fd00:10:244:1::11");

  const destroyed = parseConntrackLine(
    "[1700000000.123456] [DESTROY] tcp      6 src=10.0.0.1 dst=10.0.0.2 sport=1 dport=2 " +
      "src=10.0.0.2 dst=10.0.0.1 sport=2 dport=1 [ASSURED]",
  );
  assert.equal(destroyed?.event, "DESTROY");
  assert.equal(destroyed?.timeout, undefined);
  assert.equal(destroyed?.family, undefined);
  assert.equal(destroyed?.orig.dport, 2);
});

Deno.test("parseConntrackLine() reads port-less entries and skips non-entries", () => {
  const icmp = parseConntrackLine(
    "ipv4 2 icmp 1 29 src=10.0.0.1 dst=10.0.0.2 type=8 code=0 id=7 src=10.0.0.2 dst=10.0.0.1 " +
      "type=0 code=0 id=7 mark=0 use=1",
  );
  assert.deepEqual(icmp?.orig, { src: "10.0.0.1", dst: "10.0.0.2" });
  assert.equal(parseConntrackLine(""), undefined);
  assert.equal(
    parseConntrackLine("conntrack v1.4.7 (conntrack-tools): 3 flow entries have been shown."),
    undefined,
  );
});

Deno.test("matchesFilter() compares addresses whatever their notation", () => {
  const entry = parseConntrackLine(
    "ipv6 10 udp 17 30 src=fd00:77::2 dst=fd00:10:96::a sport=1 dport=53 " +
      "src=fd00:10:244:1::11 dst=fd00:77::2 sport=53 dport=1",
  );
  assert.ok(entry);
  assert.ok(matchesFilter(entry, { dst: "fd00:10:96:0:0:0:0:000a", proto: "udp", dport: 53 }));
  assert.ok(!matchesFilter(entry, { dst: "fd00:10:96::b" }));
  assert.ok(!matchesFilter(entry, { proto: "tcp" }));
});
