/**
 * Runs the real proxy (`main.ts`, file source) inside a topology's node namespace, with a
 * cluster file the test can rewrite, and waits for its syncs.
 *
 * The Deno binary and every npm dependency are resolved in the machine's namespace first
 * (`deno cache`), then the proxy runs with `--cached-only`: a process inside a namespace cannot
 * reach the registry (DESIGN.md §6).
 *
 * @module
 */
import { stringify } from "./yaml.ts";
import type { RawObject } from "../../src/source/events.ts";
import type { ManagedProcess } from "../netns/netns.ts";
import type { Topology } from "../netns/topology.ts";
import { NODE_NAME, POD_CIDR_V4, POD_CIDR_V6 } from "../fixtures/ip_plan.ts";

const MAIN = new URL("../../main.ts", import.meta.url).pathname;
let cached: Promise<void> | undefined;

/** Caches main.ts's dependencies once per test process (outside any namespace). */
export function cacheProxyDependencies(): Promise<void> {
  cached ??= (async () => {
    const out = await new Deno.Command(Deno.execPath(), {
      args: ["cache", "--quiet", MAIN],
      stdout: "piped",
      stderr: "piped",
    }).output();
    if (!out.success) {
      throw new Error(`deno cache main.ts failed: ${new TextDecoder().decode(out.stderr)}`);
    }
  })();
  return cached;
}

/** A proxy running in the node namespace. */
export interface RunningProxy {
  readonly process: ManagedProcess;
  /** Path of the cluster file it watches. */
  readonly file: string;
  /** Replaces the cluster file's objects and waits until the proxy has synced them. */
  update(objects: readonly RawObject[]): Promise<void>;
  /** The proxy's log so far. */
  output(): string;
  stop(): Promise<void>;
}

/** Options of {@link startProxy}. */
export interface StartProxyOptions {
  /** Extra command-line arguments. */
  args?: string[];
}

/**
 * Starts `main.ts --from-file` in the node namespace and waits for its first sync.
 *
 * @example
 * ```ts
 * const proxy = await startProxy(topo, [service(...), endpointSlice(...)]);
 * ```
 */
export async function startProxy(
  topo: Topology,
  objects: readonly RawObject[],
  options: StartProxyOptions = {},
): Promise<RunningProxy> {
  await cacheProxyDependencies();
  const dir = await Deno.makeTempDir({ prefix: "knp-e2e-" });
  const file = `${dir}/cluster.yaml`;
  await Deno.writeTextFile(file, stringify(objects));
  const process = topo.startProcess(topo.node.ns, [
    Deno.execPath(),
    "run",
    "--cached-only",
    "-A",
    MAIN,
    `--from-file=${file}`,
    `--hostname-override=${NODE_NAME}`,
    `--cluster-cidr=${POD_CIDR_V4},${POD_CIDR_V6}`,
    "--nftables-min-sync-period=50ms",
    "-v=2",
    ...(options.args ?? []),
  ], { env: { DENO_NO_UPDATE_CHECK: "1", NO_COLOR: "1" } });
  const syncs = () => process.output().match(/ synced /g)?.length ?? 0;
  const waitForSync = async (after: number) => {
    const deadline = Date.now() + 15_000;
    while (syncs() <= after) {
      if (Date.now() > deadline) {
        throw new Error(`the proxy did not sync within 15 s; its log:\n${process.output()}`);
      }
      await new Promise((r) => setTimeout(r, 20));
    }
  };
  try {
    await waitForSync(0);
  } catch (err) {
    await process.stop();
    await Deno.remove(dir, { recursive: true });
    throw err;
  }
  return {
    process,
    file,
    output: () => process.output(),
    async update(next) {
      const before = syncs();
      await Deno.writeTextFile(file, stringify(next));
      await waitForSync(before);
    },
    async stop() {
      await process.stop();
      await Deno.remove(dir, { recursive: true });
    },
  };
}
