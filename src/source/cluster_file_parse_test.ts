import assert from "node:assert/strict";
import { ClusterFileError, type ParsedClusterFile } from "./cluster_file.ts";
import { cutPoint, parseClusterBytes } from "./cluster_file_parse.ts";
import { runWithPermissions } from "../../tests/run_with_permissions.ts";

/** A Service document; `extra` lines go under metadata. */
function service(name: string, port: number, extra = ""): string {
  return `apiVersion: v1
kind: Service
metadata:
  name: ${name}
${extra}spec:
  ports:
  - port: ${port}
`;
}

/** A multi-document stream of `documents`, as `kubectl get -o yaml` joins them. */
function stream(documents: readonly string[]): string {
  return documents.join("---\n");
}

/**
 * A file that exercises everything joining parts must get right: duplicates within and across
 * the halves (one key three times), documents skipped for each reason, an empty and a
 * comment-only document, a List, and a block scalar holding an indented `---`.
 */
function mixedFile(count: number): string[] {
  const documents: string[] = ["# the cluster\n" + service("first", 1)];
  for (let i = 0; i < count; i++) {
    documents.push(service(`web-${i}`, 1000 + i));
    if (i % 7 === 3) documents.push(service(`web-${i - 2}`, 2000 + i)); // a duplicate nearby
    if (i % 11 === 5) {
      documents.push(`apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: d${i}}\n`);
    }
    if (i % 13 === 6) documents.push("apiVersion: v1\nkind: Service\nmetadata: {}\n");
    if (i % 17 === 8) documents.push("");
    if (i % 19 === 9) documents.push("# only a comment\n");
    if (i % 23 === 10) documents.push("- not\n- an object\n");
    if (i % 29 === 11) {
      documents.push(
        "apiVersion: v1\nkind: List\nitems:\n" +
          `- {apiVersion: v1, kind: Service, metadata: {name: web-1}, spec: {ports: [{port: ${i}}]}}\n` +
          "- {apiVersion: v1, kind: Pod, metadata: {name: p}}\n",
      );
    }
    if (i % 31 === 12) {
      documents.push(
        service(`notes-${i}`, 80, "  annotations:\n    doc: |\n      a\n      ---\n      b\n"),
      );
    }
  }
  // Keys from the first half again at the end: the last document wins, from the other part.
  documents.push(service("first", 2), service("web-3", 3), service(`web-${count >> 2}`, 4));
  return documents;
}

/** The file parsed with `splitAbove`, with how many parts it was parsed in. */
async function parse(
  text: string | Uint8Array,
  splitAbove: number,
): Promise<{ parts: number; parsed: ParsedClusterFile<string> }> {
  let parts = 0;
  const bytes = typeof text === "string" ? new TextEncoder().encode(text) : text;
  const parsed = await parseClusterBytes(bytes, {
    source: "cluster.yaml",
    timeoutMs: 60_000,
    warn: () => {},
    splitAbove,
    parts: (n) => parts = n,
  });
  return { parts, parsed };
}

/** What a parse gave, as plain data: the objects in order, the skipped lines, or the error. */
type Outcome =
  | { parts: number; objects: [string, { kind: string; object: string }][]; skipped: string[] }
  | { parts: number; error: { message: string; line?: number; column?: number } };

/** The error of an outcome that must have failed. */
function errorOf(result: Outcome): { message: string; line?: number; column?: number } {
  if (!("error" in result)) assert.fail(`parsed: ${JSON.stringify(result).slice(0, 300)}`);
  return result.error;
}

async function outcome(text: string | Uint8Array, splitAbove: number): Promise<Outcome> {
  try {
    const { parts, parsed } = await parse(text, splitAbove);
    return { parts, objects: [...parsed.objects], skipped: parsed.skipped };
  } catch (error) {
    assert.ok(error instanceof ClusterFileError, String(error));
    return { parts: 0, error: { message: error.message, line: error.line, column: error.column } };
  }
}

/** Parses `text` cut in two and whole; asserts the same outcome; returns the cut one's. */
async function sameCutOrWhole(
  text: string | Uint8Array,
  expectedParts: 1 | 2,
): Promise<Outcome> {
  const cut = await outcome(text, 0);
  const whole = await outcome(text, Infinity);
  const { parts: cutParts, ...cutResult } = cut;
  const { parts: wholeParts, ...wholeResult } = whole;
  assert.deepEqual(cutResult, wholeResult);
  if (!("error" in cut)) {
    assert.equal(cutParts, expectedParts);
    assert.equal(wholeParts, 1);
  }
  return cut;
}

Deno.test("parseClusterBytes() warms up the worker (type-checked on first start under deno test)", async () => {
  await parse("", Infinity);
});

Deno.test("parseClusterBytes() of a file cut in two gives what parsing it whole gives", async () => {
  const result = await sameCutOrWhole(stream(mixedFile(200)), 2);
  assert.ok(!("error" in result));
  // The file's own features survived the cut: the later duplicate wins, lines name documents
  // of the whole file.
  const objects = new Map(result.objects);
  assert.match(objects.get("Service/default/first")!.object, /"port":2/);
  assert.ok(
    result.skipped.some((line) => /skipping document 1 \(v1 Service default\/first\)/.test(line)),
  );
  assert.ok(result.skipped.length > 40);
});

Deno.test("parseClusterBytes() joins parts sent in several batches, duplicates across batches", async () => {
  // ~2,900 objects: each part more than one batch of 1,000, keys overridden across batches.
  const documents = mixedFile(2500);
  for (let i = 0; i < 40; i++) documents.push(service(`web-${i * 61}`, 5000 + i));
  const result = await sameCutOrWhole(stream(documents), 2);
  assert.ok(!("error" in result));
  assert.ok(result.objects.length > 2500);
  // A part that fails after it has sent batches fails the whole parse, with the file's line.
  const broken = documents.with(documents.length - 3, "kind: [Service\n");
  const error = errorOf(await sameCutOrWhole(stream(broken), 2));
  assert.equal(error.line, stream(documents.slice(0, -3)).split("\n").length + 2);
});

Deno.test("parseClusterBytes() takes the bytes over: the array is empty afterwards", async () => {
  const bytes = new TextEncoder().encode(service("a", 80));
  const parsed = await parseClusterBytes(bytes, {
    source: "a.yaml",
    timeoutMs: 60_000,
    warn: () => {},
  });
  assert.equal(parsed.objects.size, 1);
  assert.equal(bytes.length, 0);
});

Deno.test("parseClusterBytes() keeps a leading byte-order mark's meaning when cutting", async () => {
  const text = "\uFEFF" + stream(mixedFile(60));
  await sameCutOrWhole(text, 2);
});

Deno.test("parseClusterBytes() names the line of a syntax error in the file, in either part", async () => {
  const documents = mixedFile(100);
  for (const at of [10, documents.length - 10]) {
    const broken = documents.with(at, "apiVersion: v1\nkind: [Service\nmetadata: {name: x}\n");
    const result = await sameCutOrWhole(stream(broken), 2);
    const error = errorOf(result);
    // The broken document's third line (`metadata:`) is where the flow sequence is cut short.
    const line = stream(documents.slice(0, at)).split("\n").length + 3;
    assert.equal(error.line, line, error.message);
    assert.match(
      error.message,
      new RegExp(`^cannot parse cluster file cluster.yaml: line ${line},`),
    );
  }
});

Deno.test("parseClusterBytes() fails a quoted string that spans the cut as parsing whole does", async () => {
  const documents = mixedFile(40);
  const middle = documents.length >> 1;
  // The `---` line ends the document inside the quotes: an error either way.
  documents.splice(
    middle - 3,
    6,
    'apiVersion: v1\nkind: Service\nmetadata: {name: "q\n',
    "x\n---\ny",
    'z"}\n',
  );
  errorOf(await sameCutOrWhole(stream(documents), 2));
});

Deno.test("parseClusterBytes() shares the whole file's alias budget between the parts", async () => {
  // Each document repeats 101 values 60 times (6,000 of the 10,000 a small file gets): in
  // either half alone they fit, both halves together do not.
  const aliased = (name: string) =>
    service(
      name,
      80,
      `  annotations: {a: "[&x [${Array(100).fill(1).join(",")}], ${
        Array(60).fill("*x").join(", ")
      }]"}\n`,
    )
      .replace(/"/g, "");
  const documents = Array.from({ length: 40 }, (_, i) => service(`s${i}`, i + 1));
  const fits = documents.with(2, aliased("a1"));
  assert.ok(!("error" in await sameCutOrWhole(stream(fits), 2)));
  const tooMany = fits.with(37, aliased("a2"));
  const result = await sameCutOrWhole(stream(tooMany), 2);
  assert.match(errorOf(result).message, /aliases expand to more than 10000 values/);
  // Only in the second half: the whole budget is there for it.
  assert.ok(!("error" in await sameCutOrWhole(stream(documents.with(37, aliased("a2"))), 2)));
});

Deno.test("parseClusterBytes() parses whole, in one worker, what a cut could misread", async () => {
  const documents = mixedFile(40);
  const middle = documents.length - 5;
  const cases: Record<string, string> = {
    "a directive in the second half": stream(documents.slice(0, middle)) +
      "...\n%YAML 1.2\n---\n" + stream(documents.slice(middle)),
    "a document end marker": stream(documents.with(middle, documents[middle] + "...\n")),
    "content after ---": stream(
      documents.with(middle, "--- " + "{apiVersion: v1, kind: Node, metadata: {name: n}}\n"),
    ),
    "CRLF line endings": stream(documents).replaceAll("\n", "\r\n"),
  };
  for (const [name, text] of Object.entries(cases)) {
    const result = await sameCutOrWhole(text, 1);
    assert.ok(!("error" in result), `${name}: ${JSON.stringify(result)}`);
    assert.equal(result.parts, 1, name);
  }
});

Deno.test("parseClusterBytes() ends both workers at the time limit and on abort", async () => {
  const text = stream(mixedFile(3000));
  await assert.rejects(
    parseClusterBytes(new TextEncoder().encode(text), {
      source: "big.yaml",
      timeoutMs: 1,
      warn: () => {},
      splitAbove: 0,
    }),
    (e: unknown) =>
      e instanceof ClusterFileError &&
      e.message === "cannot parse cluster file big.yaml: not done after 0.001 s",
  );
  const controller = new AbortController();
  const parsing = parseClusterBytes(new TextEncoder().encode(text), {
    source: "big.yaml",
    timeoutMs: 60_000,
    warn: () => {},
    splitAbove: 0,
    signal: controller.signal,
  });
  controller.abort(new Error("stopping"));
  await assert.rejects(parsing, /stopping/);
});

Deno.test("cutPoint() cuts at the first `---` line after the middle, and only there", () => {
  const at = (text: string) => {
    const point = cutPoint(new TextEncoder().encode(text));
    return point === undefined ? undefined : text.slice(point);
  };
  assert.equal(at("a: 1\n---\nb: 2\n---\nc: 3\n"), "---\nc: 3\n");
  assert.equal(at("a: 1\nb: 2\nc: 3\n--- # next\nd: 4\n"), "--- # next\nd: 4\n");
  assert.equal(at("a: 1\nb: 2\nc: 3\n--- {d: 4}\n"), undefined);
  assert.equal(at("a: 1\r\nb: 2\r\n---\r\nc: 3\r\n"), undefined);
  assert.equal(at("apiVersion: v1\nkind: List\nitems:\n- a\n- b\n"), undefined);
  assert.equal(at("a: |\n  x\n  ---\n  y\nb: 2\n"), undefined);
});

Deno.test("parseClusterBytes() parses on the main thread, bytes intact, where no worker starts", async () => {
  // Without read access to the worker's module (as in a binary compiled without --include).
  const code = `import { parseClusterBytes } from ${
    JSON.stringify(import.meta.resolve("./cluster_file_parse.ts"))
  };
const text = ${JSON.stringify(stream(mixedFile(20)))};
for (const splitAbove of [Infinity, 0]) {
  const parsed = await parseClusterBytes(new TextEncoder().encode(text), {
    source: "f.yaml", timeoutMs: 60_000, warn: (line) => console.log(line), splitAbove,
  });
  console.log(JSON.stringify([[...parsed.objects], parsed.skipped]));
}
`;
  const { code: exitCode, stdout } = await runWithPermissions(code, []);
  assert.equal(exitCode, 0);
  const lines = stdout.trim().split("\n");
  assert.equal(lines.length, 3);
  assert.match(lines[0], /^cannot start a worker to parse cluster files \(Requires read access/);
  const expected = await outcome(stream(mixedFile(20)), Infinity);
  assert.ok(!("error" in expected));
  for (const line of lines.slice(1)) {
    assert.deepEqual(JSON.parse(line), [expected.objects, expected.skipped]);
  }
});
