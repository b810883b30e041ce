import assert from "node:assert/strict";
import { aliasBomb } from "../tests/fixtures/alias_bomb.ts";
import { YAMLException } from "js-yaml";
import { AliasBudget, loadYamlDocuments, MIN_ALIAS_BUDGET } from "./bounded_yaml.ts";

/** The YAMLException `fn` throws, checked to be one. */
function thrown(fn: () => unknown): YAMLException {
  try {
    fn();
  } catch (error) {
    assert.ok(error instanceof YAMLException, `not a YAMLException: ${error}`);
    return error;
  }
  assert.fail("did not throw");
}

Deno.test("loadYamlDocuments() reads every document of a stream as plain data", () => {
  assert.deepEqual(loadYamlDocuments("a: 1\n---\n- x\n- 2020-01-01\n"), [
    { a: 1 },
    ["x", "2020-01-01"],
  ]);
});

Deno.test("loadYamlDocuments() refuses a repeated key unless told the last one wins", () => {
  const text = "a: 1\nb:\n  c: 1\n  c: 2\n";
  assert.throws(() => loadYamlDocuments(text), (error: unknown) => {
    assert.ok(error instanceof YAMLException);
    assert.equal(error.reason, "duplicated mapping key");
    assert.equal(error.mark?.line, 3);
    return true;
  });
  assert.deepEqual(loadYamlDocuments(text, { duplicateKeys: "last-wins" }), [
    { a: 1, b: { c: 2 } },
  ]);
});

Deno.test("loadYamlDocuments() accepts aliases that repeat little", () => {
  assert.deepEqual(loadYamlDocuments("a: &x [1, 2]\nb: *x\nc: &s str\nd: *s\n"), [
    { a: [1, 2], b: [1, 2], c: "str", d: "str" },
  ]);
});

Deno.test("loadYamlDocuments() refuses the alias bomb at once, naming the alias's line", () => {
  const started = performance.now();
  const error = thrown(() => loadYamlDocuments(aliasBomb(), { filename: "bomb.yaml" }));
  assert.ok(performance.now() - started < 500);
  // l3 (line 9) repeats l2's 1,111 values ten times: the first alias past 10,000 is on it.
  assert.equal(error.mark?.line, 9 - 1);
  assert.match(
    error.reason,
    new RegExp(`^aliases expand to more than ${MIN_ALIAS_BUDGET} values, the limit for a file`),
  );
});

Deno.test("loadYamlDocuments() charges one budget across the texts that share it", () => {
  const aliases = new AliasBudget(5);
  loadYamlDocuments("a: &x [1, 2]\nb: *x\n", { aliases }); // 3 values
  assert.equal(aliases.remaining, 2);
  thrown(() => loadYamlDocuments("a: &x [1, 2]\nb: *x\n", { aliases }));
});

Deno.test("loadYamlDocuments() never charges a text without aliases", () => {
  const aliases = new AliasBudget(0);
  assert.deepEqual(loadYamlDocuments("a: &x [1, 2]\n", { aliases }), [{ a: [1, 2] }]);
  assert.equal(aliases.remaining, 0);
});

Deno.test("loadYamlDocuments() refuses an alias inside the value it names", () => {
  for (const text of ["a: &x [1, *x]\n", "&m {a: *m}\n"]) {
    assert.match(
      thrown(() => loadYamlDocuments(text)).reason,
      /refers to a value that contains it/,
    );
  }
});

Deno.test("loadYamlDocuments() counts the nesting an alias brings towards maxDepth", () => {
  const deep = (n: number) => "[".repeat(n) + "]".repeat(n);
  const text = (inner: number, outer: number) =>
    `a: &x ${deep(inner)}\nb: ${"[".repeat(outer)}*x${"]".repeat(outer)}\n`;
  assert.equal(loadYamlDocuments(text(40, 50)).length, 1);
  const error = thrown(() => loadYamlDocuments(text(60, 50)));
  assert.match(error.reason, /^alias \*x nests its value deeper than maxDepth \(100\)/);
  assert.equal(error.mark?.line, 1);
});

Deno.test("loadYamlDocuments() refuses nesting beyond maxDepth written out", () => {
  const error = thrown(() => loadYamlDocuments(`a: ${"[".repeat(150)}${"]".repeat(150)}\n`));
  assert.match(error.reason, /^nesting exceeded maxDepth \(100\)/);
  assert.match(thrown(() => loadYamlDocuments("[[[]]]", { maxDepth: 2 })).reason, /maxDepth \(2\)/);
});

Deno.test("loadYamlDocuments() starts every document with fresh anchors", () => {
  assert.match(
    thrown(() => loadYamlDocuments("a: &x 1\n---\nb: *x\n")).reason,
    /unidentified alias "x"/,
  );
});
