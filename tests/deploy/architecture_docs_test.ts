/**
 * docs/architecture.md stays true to the code: every file its capability table names exists, the
 * two renderers never import each other, and the back-end factory is the only code under
 * main.ts and src/backend that reads the configured mode.
 *
 * @module
 */
import assert from "node:assert/strict";
import { fileURLToPath } from "node:url";

const ROOT = fileURLToPath(new URL("../../", import.meta.url));
const docs = await Deno.readTextFile(`${ROOT}docs/architecture.md`);

/** Non-test TypeScript files under `dir` (relative to the repository), recursively. */
async function sources(dir: string): Promise<string[]> {
  const files: string[] = [];
  for await (const entry of Deno.readDir(`${ROOT}${dir}`)) {
    const path = `${dir}/${entry.name}`;
    if (entry.isDirectory) files.push(...await sources(path));
    else if (path.endsWith(".ts") && !path.endsWith("_test.ts")) files.push(path);
  }
  return files.sort();
}

/** The modules a file imports, statically or with `import()`. */
async function importsOf(path: string): Promise<string[]> {
  const text = await Deno.readTextFile(`${ROOT}${path}`);
  return [...text.matchAll(/(?:from|import\()\s*"([^"]+)"/g)].map((match) => match[1]);
}

Deno.test("docs/architecture.md names only files that exist in its capability table", async () => {
  const table = docs.slice(docs.indexOf("### Where each capability lives"));
  const rows = table.slice(0, table.indexOf("\n\n", table.indexOf("| capability")) + 1);
  const named = [...rows.matchAll(/`((?:src\/)?(?:[a-z_]+\/)+[a-z_]+\.ts)`/g)].map((m) => m[1]);
  assert.ok(named.length >= 10, rows);
  for (const path of named) {
    const full = path.startsWith("src/") ? path : `src/${path}`;
    await Deno.stat(`${ROOT}${full}`).catch(() => assert.fail(`${full} is named but missing`));
  }
});

Deno.test("render/nft and render/iptables never import each other", async () => {
  for (const [from, other] of [["nft", "iptables"], ["iptables", "nft"]]) {
    for (const path of await sources(`src/render/${from}`)) {
      const crossing = (await importsOf(path)).filter((spec) => spec.includes(`/${other}/`));
      assert.deepEqual(crossing, [], `${path} imports the ${other} renderer`);
    }
  }
});

Deno.test("only the back-end factory decides by config.mode in main.ts and src/backend", async () => {
  const readers: string[] = [];
  for (const path of ["main.ts", ...await sources("src/backend")]) {
    const code = (await Deno.readTextFile(`${ROOT}${path}`))
      .split("\n").filter((line) => !/^\s*(\*|\/\/|\/\*\*)/.test(line)).join("\n")
      .replaceAll("${config.mode}", ""); // printed in a log line, not decided on
    if (/\bconfig\.mode\b/.test(code)) readers.push(path);
  }
  assert.deepEqual(readers, ["src/backend/backends.ts"]);
});
