import assert from "node:assert/strict";
import { dryRunNft, formatDryRun } from "./dry_run.ts";
import { TableTextError } from "./table_image.ts";

const SCRIPT = `add table ip t { comment "rules"; }
add set ip t cluster-ips { type ipv4_addr; }
add element ip t cluster-ips { 10.96.0.10 }
`;

/** An `nft` stand-in that prints `stdout` (or fails with `stderr`) for every listing. */
async function fakeNft(dir: string, out: { stdout?: string; stderr?: string; code?: number }) {
  const path = `${dir}/nft`;
  await Deno.writeTextFile(`${dir}/stdout`, out.stdout ?? "");
  await Deno.writeTextFile(`${dir}/stderr`, out.stderr ?? "");
  await Deno.writeTextFile(
    path,
    `#!/bin/sh\ncat '${dir}/stdout'\ncat '${dir}/stderr' >&2\nexit ${out.code ?? 0}\n`,
  );
  await Deno.chmod(path, 0o755);
  return path;
}

async function withDir(fn: (dir: string) => Promise<void>) {
  const dir = await Deno.makeTempDir({ prefix: "knp-dry-unit-" });
  try {
    await fn(dir);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
}

Deno.test("dryRunNft() diffs a table the kernel lacks as created, and says no change when it matches", () =>
  withDir(async (dir) => {
    const missing = await fakeNft(dir, {
      stderr: "Error: No such file or directory; did you mean table 'x' in family ip?",
      code: 1,
    });
    const created = await dryRunNft(SCRIPT, { nftPath: missing });
    assert.equal(created.diff.tables[0].state, "created");
    assert.deepEqual(created.warnings, []);
    assert.match(
      formatDryRun(created.diff, "text"),
      /^# ip t: not in the kernel; created: 1 element added, 1 set or map added\nadd table ip t/,
    );

    const same = await fakeNft(dir, {
      stdout: 'table ip t {\n\tcomment "rules"\n\tset cluster-ips {\n\t\ttype ipv4_addr\n' +
        "\t\telements = { 10.96.0.10 }\n\t}\n}\n",
    });
    const report = await dryRunNft(SCRIPT, { nftPath: same });
    assert.equal(
      formatDryRun(report.diff, "text"),
      "# ip t: no change\n# no change: the kernel's tables are what the proxy wants\n",
    );
    assert.equal(JSON.parse(formatDryRun(report.diff, "json")).tables[0].state, "unchanged");
  }));

Deno.test("dryRunNft() warns when the kernel cannot be asked, and refuses a listing it cannot read", () =>
  withDir(async (dir) => {
    const denied = await fakeNft(dir, { stderr: "Error: Operation not permitted", code: 1 });
    const report = await dryRunNft(SCRIPT, { nftPath: denied });
    assert.deepEqual(report.warnings, [
      "cannot read table ip t from the kernel (Error: Operation not permitted)",
    ]);
    assert.equal(report.diff.tables[0].state, "created");

    const odd = await fakeNft(dir, { stdout: "table ip t {\n\tfrobnicate\n}\n" });
    await assert.rejects(
      dryRunNft(SCRIPT, { nftPath: odd }),
      (err: unknown) =>
        err instanceof TableTextError &&
        err.message === "table ip t: listing line 2: not a set, map or chain: frobnicate",
    );
  }));
