/**
 * Test helpers of the iptables mode: throwaway namespaces to load rendered iptables scripts
 * into (both back ends), and the proxy (`main.ts --mode=iptables --iptables-backend=…`) running in
 * a topology's node namespace, like `proxy_harness.ts` does for `main.ts`.
 *
 * @module
 */
import { stringify } from "./yaml.ts";
import { cacheDependencies } from "./proxy_harness.ts";
import type { RawObject } from "../../src/source/events.ts";
import type { IPFamily } from "../../src/model/service_port.ts";
import {
  applyIptables,
  type IptablesBackend,
  iptablesProgram,
  saveTables,
} from "../../src/apply/iptables.ts";
import type { SavedTables } from "../../src/render/iptables/reconcile.ts";
import {
  createNamespace,
  deleteNamespace,
  type ManagedProcess,
  runOk,
  shortId,
} from "../netns/netns.ts";
import type { Topology } from "../netns/topology.ts";
import { NODE_NAME, POD_CIDR_V4, POD_CIDR_V6 } from "../fixtures/ip_plan.ts";

export { kernelGate } from "../nft_scratch.ts";

/** The iptables back ends every script test loads its scripts with. */
export const BACKENDS: readonly IptablesBackend[] = ["nft", "legacy"];

/** A scratch namespace for iptables scripts. */
export interface IptablesScratch {
  readonly ns: string;
  /** Applies a planner script with `applyIptables` (full sections reconcile with the kernel). */
  apply(script: string, backend: IptablesBackend): Promise<void>;
  /** `iptables-save` / `ip6tables-save` output of one back end, unparsed. */
  saveText(family: IPFamily, backend: IptablesBackend): Promise<string>;
  /** The same, parsed. */
  save(family: IPFamily, backend: IptablesBackend): Promise<SavedTables>;
}

/** Runs `fn` with a fresh `knp-` namespace, always removed afterwards. */
export async function withIptablesScratch<T>(
  fn: (scratch: IptablesScratch) => Promise<T>,
): Promise<T> {
  const ns = `knp-${shortId()}-ipt`;
  await createNamespace(ns);
  try {
    return await fn({
      ns,
      apply: (script, backend) => applyIptables(script, { netns: ns, backend }),
      saveText: (family, backend) => runOk([iptablesProgram("save", family, backend)], { ns }),
      save: (family, backend) => saveTables(family, { netns: ns, backend }),
    });
  } finally {
    await deleteNamespace(ns, { killProcesses: true });
  }
}

/** `iptables-save` output without its timestamp comments, for byte-wise comparison. */
export function withoutComments(saved: string): string {
  return saved.split("\n").filter((l) => !l.startsWith("#")).join("\n");
}

const MAIN = new URL("../../main.ts", import.meta.url).pathname;

/** A proxy in iptables mode running in the node namespace. */
export interface RunningIptablesProxy {
  readonly process: ManagedProcess;
  /** Replaces the cluster file's objects and waits until the proxy has synced them. */
  update(objects: readonly RawObject[]): Promise<void>;
  /** The proxy's log so far. */
  output(): string;
  stop(): Promise<void>;
}

/** Options of {@link startIptablesProxy}. */
export interface StartIptablesProxyOptions {
  /** Extra command-line arguments. */
  args?: string[];
  /** Back end (`--iptables-backend`). Default `nft`. */
  backend?: IptablesBackend;
}

/**
 * Starts the proxy in iptables mode (`--from-file`) in the node namespace and waits for its
 * first sync.
 */
export async function startIptablesProxy(
  topo: Topology,
  objects: readonly RawObject[],
  options: StartIptablesProxyOptions = {},
): Promise<RunningIptablesProxy> {
  await cacheDependencies(MAIN);
  const dir = await Deno.makeTempDir({ prefix: "knp-e2e-" });
  const file = `${dir}/cluster.yaml`;
  await Deno.writeTextFile(file, stringify(objects));
  const process = topo.startProcess(topo.node.ns, [
    Deno.execPath(),
    "run",
    "--cached-only",
    "-A",
    MAIN,
    "--mode=iptables",
    `--iptables-backend=${options.backend ?? "nft"}`,
    `--from-file=${file}`,
    `--hostname-override=${NODE_NAME}`,
    `--cluster-cidr=${POD_CIDR_V4},${POD_CIDR_V6}`,
    "--iptables-min-sync-period=50ms",
    "-v=2",
    ...(options.args ?? []),
  ], {
    env: { DENO_NO_UPDATE_CHECK: "1", NO_COLOR: "1" },
  });
  const syncs = () => process.output().match(/ synced /g)?.length ?? 0;
  const waitForSync = async (after: number) => {
    const deadline = Date.now() + 30_000;
    while (syncs() <= after) {
      if (Date.now() > deadline) {
        throw new Error(`the proxy did not sync within 30 s; its log:\n${process.output()}`);
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
