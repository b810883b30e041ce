import assert from "node:assert/strict";
import { canonicalJson, ClusterFileError, parseClusterFile } from "./cluster_file.ts";

/** A Service document whose annotation `name` holds `value` (YAML flow text). */
function annotated(name: string, value: string): string {
  return `apiVersion: v1
kind: Service
metadata:
  name: ${name}
  annotations:
    a: ${value}
spec: {ports: [{port: 80}]}
`;
}

/** The ClusterFileError `fn` throws. */
function thrown(fn: () => unknown): ClusterFileError {
  try {
    fn();
  } catch (error) {
    assert.ok(error instanceof ClusterFileError, `not a ClusterFileError: ${error}`);
    return error;
  }
  assert.fail("did not throw");
}

Deno.test("parseClusterFile() refuses an alias bomb at once, naming file, line and column", () => {
  const levels = [`    l0: &l0 [${Array(10).fill("lol").join(", ")}]`];
  for (let i = 1; i < 9; i++) levels.push(`    l${i}: &l${i} [${Array(10).fill(`*l${i - 1}`)}]`);
  const text = `apiVersion: v1\nkind: Service\nmetadata:\n  name: bomb\n  annotations:\n${
    levels.join("\n")
  }\n`;
  const started = performance.now();
  const error = thrown(() => parseClusterFile(text, { source: "bomb.yaml" }));
  assert.ok(performance.now() - started < 500);
  assert.equal(
    error.message,
    "cannot parse cluster file bomb.yaml: line 9, column 42: aliases expand to more than 10000 " +
      "values, the limit for a file of this size; write the values out instead",
  );
});

Deno.test("parseClusterFile() shares one alias budget among the documents of a file", () => {
  // Each document repeats 101 values 60 times: one alone fits the 10,000 of a small file, two
  // do not.
  const value = `[&x [${Array(100).fill(1).join(",")}], ${Array(60).fill("*x").join(", ")}]`;
  const one = annotated("a", value);
  assert.equal(parseClusterFile(one).objects.size, 1);
  const error = thrown(() => parseClusterFile(`${one}---\n${annotated("b", value)}`));
  assert.equal(error.line, 7 + 1 + 6);
});

Deno.test("parseClusterFile() refuses nesting deeper than 100 in any document", () => {
  const deep = `${"[".repeat(150)}${"]".repeat(150)}`;
  const error = thrown(() =>
    parseClusterFile(`${annotated("a", "1")}---\n${annotated("b", deep)}`, { source: "c.yaml" })
  );
  assert.equal(
    error.message,
    "cannot parse cluster file c.yaml: line 14, column 105: nesting exceeded maxDepth (100)",
  );
});

Deno.test("parseClusterFile() reads aliases that repeat little as written out", () => {
  const { objects } = parseClusterFile(
    "apiVersion: v1\nkind: Service\nmetadata: {name: a, labels: &l {app: web}}\n" +
      "spec: {selector: *l, ports: [{port: 80}]}\n",
  );
  const spec = objects.get("Service/default/a")?.object.spec as Record<string, unknown>;
  assert.deepEqual(spec.selector, { app: "web" });
});

Deno.test("canonicalJson() writes what JSON.stringify writes with every object's keys sorted", () => {
  const sortedKeys = (value: unknown) =>
    JSON.stringify(
      value,
      (_key, v: unknown) =>
        typeof v === "object" && v !== null && !Array.isArray(v)
          ? Object.fromEntries(
            Object.keys(v).sort().map((k) => [k, (v as Record<string, unknown>)[k]]),
          )
          : v,
    );
  const { objects } = parseClusterFile(
    'apiVersion: v1\nkind: Service\nmetadata: {name: a, labels: {z: "1", "\\u00e9": x, A: y, "": e}}\n' +
      "spec: {ports: [{port: 80, name: p}, {}], x: [[], [.nan, .inf, -0, -.inf, null, true]], " +
      '"__proto__": {polluted: yes}, nested: [{b: [{d: 1, c: 2}], a: 0}]}\n',
  );
  const service = objects.get("Service/default/a")!.object;
  assert.equal(canonicalJson(service), sortedKeys(service));
  assert.match(canonicalJson(service), /"__proto__":\{"polluted":"yes"\}/);
  assert.equal(canonicalJson({ b: undefined, a: [undefined, 1] }), '{"a":[null,1]}');
});
