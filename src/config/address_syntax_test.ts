import assert from "node:assert/strict";
import {
  appendPortIfNeeded,
  cidrFamily,
  ipFamily,
  isUnspecifiedIP,
  splitHostPort,
} from "./address_syntax.ts";

Deno.test("ipFamily() reads IPs the way Go's sloppy parser does", () => {
  const cases: [string, 4 | 6 | undefined][] = [
    ["10.0.0.1", 4],
    ["010.000.000.001", 4], // leading zeros are decimal, as in ParseIPSloppy
    ["255.255.255.255", 4],
    ["256.0.0.1", undefined],
    ["10.1", undefined],
    ["0xa.0.0.1", undefined],
    ["fd00::1", 6],
    ["::", 6],
    ["::ffff:10.0.0.1", 4], // IPv4-mapped: To4() != nil in Go
    ["fe80::1%eth0", undefined],
    ["", undefined],
    ["node-1", undefined],
  ];
  for (const [text, family] of cases) {
    assert.equal(ipFamily(text), family, text);
  }
});

Deno.test("cidrFamily() accepts CIDRs with host bits set and refuses bad prefixes", () => {
  const cases: [string, 4 | 6 | undefined][] = [
    ["10.244.0.0/16", 4],
    ["10.244.0.1/16", 4],
    ["0.0.0.0/0", 4],
    ["10.0.0.0/32", 4],
    ["10.0.0.0/33", undefined],
    ["10.0.0.0/-1", undefined],
    ["10.0.0.0/", undefined],
    ["10.0.0.0", undefined],
    ["fd00:10:244::/56", 6],
    ["::/0", 6],
    ["fd00::/129", undefined],
    [" 10.0.0.0/8", undefined],
  ];
  for (const [text, family] of cases) {
    assert.equal(cidrFamily(text), family, text);
  }
});

Deno.test("splitHostPort() splits like Go's net.SplitHostPort", () => {
  assert.deepEqual(splitHostPort("0.0.0.0:10256"), { host: "0.0.0.0", port: "10256" });
  assert.deepEqual(splitHostPort("[::1]:10249"), { host: "::1", port: "10249" });
  assert.deepEqual(splitHostPort(":80"), { host: "", port: "80" });
  assert.equal(splitHostPort("0.0.0.0"), undefined);
  assert.equal(splitHostPort("::1"), undefined);
  assert.equal(splitHostPort("[::1]"), undefined);
});

Deno.test("appendPortIfNeeded() adds the port to bare IPs only", () => {
  assert.equal(appendPortIfNeeded("0.0.0.0", 10256), "0.0.0.0:10256");
  assert.equal(appendPortIfNeeded("::", 10256), "[::]:10256");
  assert.equal(appendPortIfNeeded("[::1]:9000", 10249), "[::1]:9000");
  assert.equal(appendPortIfNeeded("localhost", 10249), "localhost");
  assert.equal(appendPortIfNeeded("", 10249), "");
});

Deno.test("isUnspecifiedIP() knows 0.0.0.0 and ::", () => {
  assert.equal(isUnspecifiedIP("0.0.0.0"), true);
  assert.equal(isUnspecifiedIP("::"), true);
  assert.equal(isUnspecifiedIP("0:0::0"), true);
  assert.equal(isUnspecifiedIP("10.0.0.1"), false);
  assert.equal(isUnspecifiedIP("nope"), false);
});
