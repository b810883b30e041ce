import assert from "node:assert/strict";
import {
  AttributeWriter,
  ElementCodecError,
  setCodec,
  splitElements,
  writeElement,
} from "./nft_element_codec.ts";

/** The attributes `writeElement` writes for one element, as bytes. */
function encoded(body: string, element: string): number[] {
  const codec = setCodec(body);
  assert.ok(codec, `codable: ${body}`);
  const out = new AttributeWriter();
  for (const e of splitElements(element)) writeElement(out, codec, e);
  return [...out.bytes()];
}

/** One attribute: length, type (nested flag when `nested`), value, padding. */
function attr(type: number, value: number[], nested = false): number[] {
  const length = 4 + value.length;
  const out = [length & 0xff, length >> 8, type & 0xff, (type >> 8) | (nested ? 0x80 : 0)];
  out.push(...value);
  while (out.length % 4 !== 0) out.push(0);
  return out;
}
const text = (s: string) => [...new TextEncoder().encode(`${s}\0`)];
const be32 = (n: number) => [(n >>> 24) & 0xff, (n >>> 16) & 0xff, (n >>> 8) & 0xff, n & 0xff];

Deno.test("setCodec() reads the proxy's set declarations, and refuses what nft must encode", () => {
  assert.deepEqual(
    setCodec('type ipv4_addr . inet_proto . inet_service : verdict; counter; comment "x";'),
    { key: ["ipv4", "proto", "service"], value: "verdict" },
  );
  assert.deepEqual(
    setCodec(
      "typeof ip6 daddr . meta l4proto . th dport . numgen random mod 1 : ip6 daddr . tcp dport;",
    ),
    { key: ["ipv6", "proto", "service", "u32"], value: ["ipv6", "service"] },
  );
  assert.deepEqual(setCodec('type ipv4_addr; comment "Active ClusterIPs";'), {
    key: ["ipv4"],
    value: undefined,
  });
  // Intervals, timeouts, dynamic sets and other types stay with nft.
  assert.equal(
    setCodec("type ipv4_addr . inet_proto . inet_service . ipv4_addr; flags interval;"),
    undefined,
  );
  assert.equal(
    setCodec("type ipv4_addr . classid : ipv4_addr . inet_service; flags dynamic,timeout;"),
    undefined,
  );
  assert.equal(setCodec("type classid : verdict;"), undefined);
  assert.equal(setCodec("type constructor;"), undefined);
  assert.equal(setCodec("type ipv6_addr; timeout 10800s;"), undefined);
});

Deno.test("an endpoint element: concatenated fields padded to 4 bytes, the index in host order", () => {
  const body =
    "typeof ip daddr . meta l4proto . th dport . numgen random mod 1 : ip daddr . tcp dport;";
  const key = [10, 96, 0, 10, 6, 0, 0, 0, 0, 80, 0, 0, 3, 0, 0, 0];
  const value = [10, 128, 0, 2, 0x1f, 0x90, 0, 0];
  assert.deepEqual(
    encoded(body, "10.96.0.10 . tcp . 80 . 3 : 10.128.0.2 . 8080"),
    attr(1, [...attr(1, [...attr(1, key)], true), ...attr(2, [...attr(1, value)], true)], true),
  );
});

Deno.test("a dispatch element: a goto verdict and the service's name as the comment", () => {
  const body = "type ipv4_addr . inet_proto . inet_service : verdict; counter;";
  const key = [10, 96, 0, 10, 17, 0, 0, 0, 0, 53, 0, 0];
  const verdict = [...attr(1, be32(-4)), ...attr(2, text("lb-udp-2"))];
  const comment = text("kube-system/kube-dns:dns");
  assert.deepEqual(
    encoded(body, '10.96.0.10 . udp . 53 comment "kube-system/kube-dns:dns" : goto lb-udp-2'),
    attr(1, [
      ...attr(1, [...attr(1, key)], true),
      ...attr(2, [...attr(2, verdict, true)], true),
      ...attr(6, [0, comment.length, ...comment]),
    ], true),
  );
});

Deno.test("a single-field key is not padded; IPv6 keys keep their colons", () => {
  assert.deepEqual(
    encoded("type ipv6_addr;", 'fd00::a comment "ns/web:http", fd00::b'),
    [
      ...attr(1, [
        ...attr(1, [...attr(1, [0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xa])], true),
        ...attr(6, [0, 12, ...text("ns/web:http")]),
      ], true),
      ...attr(1, [
        ...attr(1, [...attr(1, [0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xb])], true),
      ], true),
    ],
  );
});

Deno.test("splitElements() splits at element boundaries only, not inside comments", () => {
  assert.deepEqual([...splitElements('1.2.3.4 comment "a, b : c", 5.6.7.8 : goto x')], [
    { key: "1.2.3.4", comment: "a, b : c", value: undefined },
    { key: "5.6.7.8", comment: undefined, value: "goto x" },
  ]);
});

Deno.test("anything nft would have to judge throws ElementCodecError, for nft -f to say", () => {
  const dispatch = "type ipv4_addr . inet_proto . inet_service : verdict;";
  for (
    const element of [
      "10.96.0.256 . tcp . 80 : goto x", // not an address
      "10.96.0.01 . tcp . 80 : goto x", // leading zero
      "10.96.0.1.5 . tcp . 80 : goto x", // five parts
      "10.96.0.1 . tcp . 65536 : goto x", // not a port
      "10.96.0.1 . tcp . 80 : goto a b", // not a verdict
      '10.96.0.1 . tcp . 80 : goto "x"', // not a chain name
      "10.96.0.1 . tcp : goto x", // too few fields
      "10.96.0.1 . tcp . 80", // no value in a map
      "10.96.0.1 . constructor . 80 : goto x", // not a protocol
      "10.96.0.1 . tcp . 80 : constructor", // not a verdict
    ]
  ) {
    assert.throws(() => encoded(dispatch, element), ElementCodecError, element);
  }
  assert.throws(() => encoded("type ipv6_addr;", "10.0.0.1"), ElementCodecError);
  assert.throws(
    () => encoded("type ipv4_addr;", `10.0.0.1 comment "${"x".repeat(129)}"`),
    ElementCodecError,
  );
});
