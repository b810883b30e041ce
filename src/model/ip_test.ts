import assert from "node:assert/strict";
import { cidrContains, parseAddress, parseCIDR } from "./ip.ts";

Deno.test("parseAddress() returns the canonical form and family", () => {
  assert.deepEqual(parseAddress("10.96.0.1"), { ok: true, address: "10.96.0.1", family: "IPv4" });
  assert.deepEqual(parseAddress("FD00:0:0::0001"), {
    ok: true,
    address: "fd00::1",
    family: "IPv6",
  });
});

Deno.test("parseAddress() reads leading zeros as decimal and mapped IPv6 as IPv4, like ParseIPSloppy", () => {
  assert.deepEqual(parseAddress("010.096.000.010"), {
    ok: true,
    address: "10.96.0.10",
    family: "IPv4",
  });
  assert.deepEqual(parseAddress("::ffff:10.0.0.1"), {
    ok: true,
    address: "10.0.0.1",
    family: "IPv4",
  });
  const cidr = parseCIDR("010.244.0.0/16");
  assert.equal(cidr.ok && cidr.cidr, "10.244.0.0/16");
});

Deno.test("parseAddress() takes every canonical IPv4 address as it is written", () => {
  for (const ip of ["0.0.0.0", "1.2.3.4", "9.99.199.249", "255.255.255.255", "10.244.0.100"]) {
    assert.deepEqual(parseAddress(ip), { ok: true, address: ip, family: "IPv4" });
  }
});

Deno.test("parseAddress() refuses invalid text", () => {
  for (
    const bad of [
      "10.0.0.300",
      "0256.0.0.1",
      "1.2.3",
      "1.2.3.4.5",
      "",
      "fe80::1%eth0",
      "a.b.c.d",
      "256.1.1.1",
      "1.2.3.4\n",
      " 1.2.3.4",
    ]
  ) {
    assert.equal(parseAddress(bad).ok, false, bad);
  }
  assert.equal(parseAddress(42).ok, false);
  assert.equal(parseAddress(undefined).ok, false);
});

Deno.test("parseCIDR() trims whitespace and clears host bits", () => {
  assert.deepEqual(parseCIDR(" 10.1.2.3/16 "), {
    ok: true,
    cidr: "10.1.0.0/16",
    family: "IPv4",
    network: "10.1.0.0",
    prefix: 16,
  });
  const v6 = parseCIDR("fd00:10:244::1/56");
  assert.equal(v6.ok && v6.cidr, "fd00:10:244::/56");
});

Deno.test("parseCIDR() refuses a missing or oversized prefix", () => {
  for (const bad of ["10.0.0.0", "10.0.0.0/33", "fd00::/129", "10.0.0.0/x", "10.0.0.0/-1"]) {
    assert.equal(parseCIDR(bad).ok, false, bad);
  }
});

Deno.test("cidrContains() matches only addresses of the same family inside the range", () => {
  assert.equal(cidrContains("10.244.0.0/16", "10.244.3.4"), true);
  assert.equal(cidrContains("10.244.0.0/16", "10.245.0.1"), false);
  assert.equal(cidrContains("fd00::/8", "10.0.0.1"), false);
});
