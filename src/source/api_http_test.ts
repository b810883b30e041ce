import assert from "node:assert/strict";
import { readLineBatches, ResponseTooLargeError } from "./api_http.ts";

/** A body that arrives in exactly these pieces. */
function body(...pieces: (string | Uint8Array)[]): ReadableStream<Uint8Array> {
  const encoder = new TextEncoder();
  return ReadableStream.from(
    pieces.map((piece) => typeof piece === "string" ? encoder.encode(piece) : piece),
  );
}

/** Every line read, and the error that ended the reading, if one did. */
async function read(
  stream: ReadableStream<Uint8Array>,
  maxLineBytes = 1000,
): Promise<{ lines: string[]; error?: Error }> {
  const lines: string[] = [];
  try {
    for await (const batch of readLineBatches(stream, { maxLineBytes })) lines.push(...batch);
    return { lines };
  } catch (error) {
    return { lines, error: error as Error };
  }
}

Deno.test("readLineBatches() gives every line once, however the body is cut", async () => {
  const text = '{"a":1}\n{"b":"ünïcödé ✓"}\n\n{"c":3}\n';
  const bytes = new TextEncoder().encode(text);
  const expected = ['{"a":1}', '{"b":"ünïcödé ✓"}', "", '{"c":3}'];
  // Every cut, including ones inside a multi-byte character.
  for (let cut = 0; cut <= bytes.length; cut++) {
    const { lines, error } = await read(body(bytes.slice(0, cut), bytes.slice(cut)));
    assert.equal(error, undefined);
    assert.deepEqual(lines, expected, `cut at byte ${cut}`);
  }
  assert.deepEqual((await read(body(...[...text].map((c) => c)))).lines, expected);
});

Deno.test("readLineBatches() gives a last line without a newline, and no blank last line", async () => {
  assert.deepEqual((await read(body("one\ntwo"))).lines, ["one", "two"]);
  assert.deepEqual((await read(body("one\n  "))).lines, ["one"]);
});

Deno.test("readLineBatches() refuses a line longer than maxLineBytes, after the lines before it", async () => {
  const long = "x".repeat(11);
  const within = await read(body(`ok\n${"y".repeat(10)}\n`), 10);
  assert.deepEqual(within.lines, ["ok", "y".repeat(10)]);
  for (const stream of [body(`ok\n${long}\nnever\n`), body("ok\nxxxxx", "xxxxxx\nnever\n")]) {
    const { lines, error } = await read(stream, 10);
    assert.deepEqual(lines, ["ok"]);
    assert.ok(error instanceof ResponseTooLargeError, String(error));
    assert.match(error.message, /a line larger than/);
  }
  // A line that never ends is refused as soon as it is too long, not when the body ends.
  const endless = await read(body("ok\nxxxxxx", "xxxxxx", "xxxxxx"), 10);
  assert.deepEqual(endless.lines, ["ok"]);
  assert.ok(endless.error instanceof ResponseTooLargeError);
});
