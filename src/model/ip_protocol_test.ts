import assert from "node:assert/strict";
import { protocolName } from "./ip_protocol.ts";

Deno.test("protocolName() names the numbers nft prints without /etc/protocols", () => {
  assert.equal(protocolName(6), "tcp");
  assert.equal(protocolName("17"), "udp");
  assert.equal(protocolName("132"), "sctp");
  assert.equal(protocolName("58"), "ipv6-icmp");
});

Deno.test("protocolName() keeps names and unknown numbers as they are", () => {
  assert.equal(protocolName("tcp"), "tcp");
  assert.equal(protocolName(253), "253");
  assert.equal(protocolName("0x06"), "0x06");
});
