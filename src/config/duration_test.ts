import assert from "node:assert/strict";
import { formatGoDuration, parseGoDuration } from "./duration.ts";

Deno.test("parseGoDuration() reads Go duration strings into milliseconds", () => {
  const cases: [string, number][] = [
    ["30s", 30_000],
    ["1m0s", 60_000],
    ["500ms", 500],
    ["1h2m3.5s", 3_723_500],
    ["2h45m", 9_900_000],
    ["1.5h", 5_400_000],
    [".5s", 500],
    ["1.s", 1_000],
    ["0", 0],
    ["0s", 0],
    ["-0", 0],
    ["+5s", 5_000],
    ["-1.5s", -1_500],
    ["100us", 0.1],
    ["100µs", 0.1],
    ["100μs", 0.1],
    ["1500us", 1.5],
    ["1ns", 0.000001],
    ["1h1ns", 3_600_000.000001],
    ["2562047h47m16.854775807s", 9_223_372_036_854.775],
  ];
  for (const [text, ms] of cases) {
    assert.equal(parseGoDuration(text), ms, text);
  }
});

Deno.test("parseGoDuration() rejects what Go rejects, with Go's messages", () => {
  const cases: [string, string][] = [
    ["", 'time: invalid duration ""'],
    ["30", 'time: missing unit in duration "30"'],
    ["1m30", 'time: missing unit in duration "1m30"'],
    ["1d", 'time: unknown unit "d" in duration "1d"'],
    ["1s ", 'time: unknown unit "s " in duration "1s "'],
    ["1S", 'time: unknown unit "S" in duration "1S"'],
    ["s", 'time: invalid duration "s"'],
    ["-", 'time: invalid duration "-"'],
    [".s", 'time: invalid duration ".s"'],
    ["1..5s", 'time: missing unit in duration "1..5s"'],
    [" 1s", 'time: invalid duration " 1s"'],
    ["9223372036854775808ns", 'time: invalid duration "9223372036854775808ns"'],
    ["2562048h", 'time: invalid duration "2562048h"'],
  ];
  for (const [text, message] of cases) {
    assert.throws(() => parseGoDuration(text), { name: "SyntaxError", message }, text);
  }
});

Deno.test("parseGoDuration() accepts Go's smallest duration, -2^63 ns", () => {
  assert.equal(parseGoDuration("-9223372036854775808ns"), -9_223_372_036_854.775);
});

Deno.test("formatGoDuration() writes milliseconds the way Go's Duration.String does", () => {
  const cases: [number, string][] = [
    [0, "0s"],
    [500, "500ms"],
    [1.5, "1.5ms"],
    [0.5, "500µs"],
    [0.000001, "1ns"],
    [1_000, "1s"],
    [1_500, "1.5s"],
    [30_000, "30s"],
    [60_000, "1m0s"],
    [90_000, "1m30s"],
    [3_600_000, "1h0m0s"],
    [3_723_500, "1h2m3.5s"],
    [90_000_000, "25h0m0s"],
    [-30_000, "-30s"],
    [-0.25, "-250µs"],
  ];
  for (const [ms, text] of cases) {
    assert.equal(formatGoDuration(ms), text, String(ms));
  }
});

Deno.test("formatGoDuration() output reads back to the same value", () => {
  for (const ms of [0, 1, 999, 1_000, 1_234.5, 59_999, 61_000, 3_723_500, 86_400_000, -1_500]) {
    assert.equal(parseGoDuration(formatGoDuration(ms)), ms, String(ms));
  }
});

Deno.test("formatGoDuration() refuses non-finite values", () => {
  assert.throws(() => formatGoDuration(Number.NaN), RangeError);
  assert.throws(() => formatGoDuration(Infinity), RangeError);
});
