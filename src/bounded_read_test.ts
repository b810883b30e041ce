import assert from "node:assert/strict";
import {
  formatBytes,
  InputTooLargeError,
  readFileBounded,
  readTextFileBounded,
} from "./bounded_read.ts";

async function withFile(content: Uint8Array, fn: (path: string) => Promise<void>): Promise<void> {
  const path = await Deno.makeTempFile({ prefix: "bounded-read-test-" });
  try {
    await Deno.writeFile(path, content);
    await fn(path);
  } finally {
    await Deno.remove(path);
  }
}

Deno.test("readFileBounded() reads a file up to the limit whole", async () => {
  const content = new Uint8Array(3 * 2 ** 20 + 7).map((_, i) => i % 251);
  await withFile(content, async (path) => {
    assert.deepEqual(await readFileBounded(path, content.length), content);
  });
});

Deno.test("readFileBounded() refuses a file one byte over the limit", async () => {
  await withFile(new Uint8Array(101), async (path) => {
    await assert.rejects(
      () => readFileBounded(path, 100),
      (e: unknown) => e instanceof InputTooLargeError && e.limit === 100,
    );
  });
});

Deno.test("readFileBounded() stops reading a file that never ends", async () => {
  const started = performance.now();
  await assert.rejects(() => readFileBounded("/dev/zero", 2 ** 20), InputTooLargeError);
  assert.ok(performance.now() - started < 2000);
});

Deno.test("readFileBounded() passes Deno's errors on", async () => {
  await assert.rejects(() => readFileBounded("/nonexistent/file", 10), Deno.errors.NotFound);
});

Deno.test("readTextFileBounded() decodes UTF-8, replacing invalid bytes", async () => {
  await withFile(new Uint8Array([0x61, 0xff, 0x62]), async (path) => {
    assert.equal(await readTextFileBounded(path, 10), "a\ufffdb");
  });
});

Deno.test("formatBytes() writes limits as people do", () => {
  assert.equal(formatBytes(128 * 2 ** 20), "128 MiB");
  assert.equal(formatBytes(2 ** 30), "1 GiB");
  assert.equal(formatBytes(1536), "1536 bytes");
});
