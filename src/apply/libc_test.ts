import assert from "node:assert/strict";
import { runWithPermissions } from "../../tests/run_with_permissions.ts";
import { libcCandidates } from "./libc.ts";

const LIBC = libcCandidates()[0];
const HERE = new URL("./libc.ts", import.meta.url).href;
const hasLibcThere = (() => {
  try {
    return Deno.statSync(LIBC).isFile;
  } catch {
    return false;
  }
})();

/** Opens libc in a Deno with `permissions`; what it printed, or the error's first line. */
async function openWith(permissions: string[]): Promise<string> {
  const code = `import { dlopenLibc } from ${JSON.stringify(HERE)};
    try {
      const libc = dlopenLibc({ getpid: { parameters: [], result: "i32" } });
      console.log(libc.symbols.getpid() === Deno.pid ? "opened" : "wrong pid");
    } catch (error) {
      console.log(error.message);
    }`;
  return (await runWithPermissions(code, permissions)).stdout.trim();
}

Deno.test({
  name: "dlopenLibc() opens libc with FFI permission for its one file, as the image grants it",
  ignore: !hasLibcThere,
  async fn() {
    assert.equal(await openWith([`--allow-ffi=${LIBC}`]), "opened");
    assert.equal(await openWith(["--allow-ffi"]), "opened");
  },
});

Deno.test({
  name: "dlopenLibc() without FFI permission fails naming the path it tried first",
  ignore: !hasLibcThere,
  async fn() {
    const answer = await openWith([]);
    assert.match(answer, new RegExp(`^${LIBC}: Requires ffi access`));
    assert.match(answer, /libc\.so\.6: Requires ffi access/);
  },
});

Deno.test("libcCandidates() tries the multiarch path of the architecture first, bare names last", () => {
  const candidates = libcCandidates("aarch64");
  assert.equal(candidates[0], "/lib/aarch64-linux-gnu/libc.so.6");
  assert.deepEqual(candidates.slice(-2), ["libc.so.6", "libc.so"]);
});
