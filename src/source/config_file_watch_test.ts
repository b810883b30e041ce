import assert from "node:assert/strict";
import { watchConfigFile } from "./config_file_watch.ts";

/** Starts watching `path` as loaded with `loaded`; `changed` resolves with the line, if any. */
function watch(path: string, loaded: string) {
  const controller = new AbortController();
  const lines: string[] = [];
  const done = watchConfigFile(path, {
    loaded,
    onChange: (line) => lines.push(line),
    signal: controller.signal,
  });
  return { lines, done, stop: () => controller.abort() };
}

/** Waits until `check()` holds, polling every 20 ms for at most `ms`. */
async function until(check: () => boolean, ms = 10_000): Promise<boolean> {
  const deadline = Date.now() + ms;
  while (!check() && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
  return check();
}

Deno.test("watchConfigFile() reports a change of the file's content once, naming the file", async () => {
  const dir = await Deno.makeTempDir({ prefix: "knp-cfg-watch-" });
  try {
    const path = `${dir}/config.conf`;
    await Deno.writeTextFile(path, "mode: nftables\n");
    const watching = watch(path, "mode: nftables\n");
    await new Promise((r) => setTimeout(r, 100));
    await Deno.writeTextFile(path, "mode: iptables\n");
    assert.ok(await until(() => watching.lines.length > 0), "no change reported");
    await watching.done;
    assert.deepEqual(watching.lines, [
      `configuration file ${path} was updated: exiting to load it`,
    ]);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("watchConfigFile() sees a ConfigMap update: the ..data symlink swapped in the directory", async () => {
  const dir = await Deno.makeTempDir({ prefix: "knp-cfg-watch-" });
  try {
    // The kubelet's layout: config.conf → ..data/config.conf, ..data → ..<timestamp>.
    await Deno.mkdir(`${dir}/..2026_11_25_1`);
    await Deno.writeTextFile(`${dir}/..2026_11_25_1/config.conf`, "mode: nftables\n");
    await Deno.symlink("..2026_11_25_1", `${dir}/..data`);
    await Deno.symlink("..data/config.conf", `${dir}/config.conf`);
    const path = `${dir}/config.conf`;
    const watching = watch(path, "mode: nftables\n");
    await new Promise((r) => setTimeout(r, 100));
    await Deno.mkdir(`${dir}/..2026_11_25_2`);
    await Deno.writeTextFile(`${dir}/..2026_11_25_2/config.conf`, "mode: iptables\n");
    await Deno.symlink("..2026_11_25_2", `${dir}/..data_tmp`);
    await Deno.rename(`${dir}/..data_tmp`, `${dir}/..data`);
    assert.ok(await until(() => watching.lines.length > 0), "no change reported");
    await watching.done;
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("watchConfigFile() ignores events that leave the content unchanged, until stopped", async () => {
  const dir = await Deno.makeTempDir({ prefix: "knp-cfg-watch-" });
  try {
    const path = `${dir}/config.conf`;
    await Deno.writeTextFile(path, "mode: nftables\n");
    const watching = watch(path, "mode: nftables\n");
    await new Promise((r) => setTimeout(r, 100));
    await Deno.writeTextFile(path, "mode: nftables\n");
    await Deno.writeTextFile(`${dir}/other.conf`, "something else\n");
    await new Promise((r) => setTimeout(r, 500));
    watching.stop();
    await watching.done;
    assert.deepEqual(watching.lines, []);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});
