/**
 * Specs of `explain` on a real node's files: the cluster file is read with the file source's
 * size limit, its problems and a bad command line are one line with exit 2, and `--help`
 * prints the usage.
 *
 * @module
 */
import assert from "node:assert/strict";
import { DEFAULT_MAX_FILE_BYTES } from "../source/file_source.ts";
import { EXPLAIN_USAGE, explainCommand } from "./command.ts";
import { nodeExplainIO } from "./node_io.ts";

/** Runs `explain` with the node's file reading, capturing what it prints. */
async function explain(args: string[]) {
  const out: string[] = [];
  const err: string[] = [];
  const io = {
    ...nodeExplainIO(),
    print: (text: string) => out.push(text),
    printError: (line: string) => err.push(line),
  };
  const code = await explainCommand(args, io);
  return { code, out, err };
}

const QUERY = ["--from", "192.168.77.2", "--to", "10.96.0.10:80/tcp"];

Deno.test("explainCommand() refuses a cluster file over the file source's limit in one line, without reading it", async () => {
  const dir = await Deno.makeTempDir({ prefix: "knp-explain-" });
  try {
    const file = `${dir}/huge.yaml`;
    // Sparse: the size is over the limit, the disk holds nothing.
    await Deno.writeTextFile(file, "");
    await Deno.truncate(file, DEFAULT_MAX_FILE_BYTES + 1);
    const { code, out, err } = await explain([...QUERY, `--from-file=${file}`]);
    assert.equal(code, 2);
    assert.deepEqual(out, []);
    assert.deepEqual(err, [
      `kube-nftproxy explain: cannot read cluster file ${file}: larger than 128 MiB, ` +
      "the most a cluster file may hold",
    ]);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("explainCommand() names a missing cluster file in one line", async () => {
  const { code, err } = await explain([...QUERY, "--from-file=/nonexistent/cluster.yaml"]);
  assert.equal(code, 2);
  assert.deepEqual(err, [
    "kube-nftproxy explain: cannot read cluster file /nonexistent/cluster.yaml: no such file",
  ]);
});

Deno.test("explainCommand() prints its usage for --help and -h, and exits 0", async () => {
  for (const flag of ["--help", "-h"]) {
    const { code, out, err } = await explain([flag]);
    assert.equal(code, 0);
    assert.deepEqual(err, []);
    assert.deepEqual(out, [EXPLAIN_USAGE]);
    assert.match(out[0], /^Usage: kube-nftproxy explain --from ADDR --to ADDR:PORT/);
    for (const option of ["--from", "--to", "--output", "--live", "--from-file"]) {
      assert.ok(out[0].includes(option), `usage mentions ${option}`);
    }
  }
});
