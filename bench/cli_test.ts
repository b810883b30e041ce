import assert from "node:assert/strict";
import { InvalidArgumentError } from "@commander-js/extra-typings";
import { integerIn, parseMix } from "./cli.ts";

Deno.test("parseMix() reads KEY=SHARE pairs and treats an empty list as ClusterIP only", () => {
  assert.deepEqual(parseMix("nodePort=0.1, udp=0.25"), { nodePort: 0.1, udp: 0.25 });
  assert.deepEqual(parseMix(""), {});
});

Deno.test("parseMix() refuses unknown features and shares outside 0-1", () => {
  assert.throws(() => parseMix("headless=0.1"), InvalidArgumentError);
  assert.throws(() => parseMix("udp=1.5"), InvalidArgumentError);
  assert.throws(() => parseMix("udp"), InvalidArgumentError);
});

Deno.test("integerIn() accepts integers in range only", () => {
  const parse = integerIn(1, 10);
  assert.equal(parse("7"), 7);
  assert.throws(() => parse("0"), InvalidArgumentError);
  assert.throws(() => parse("2.5"), InvalidArgumentError);
  assert.throws(() => parse("ten"), InvalidArgumentError);
});
