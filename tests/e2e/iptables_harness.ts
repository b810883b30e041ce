/**
 * Test helpers of the iptables mode: throwaway namespaces to load rendered iptables scripts
 * into (both back ends), and the proxy (`main.ts --mode=iptables --iptables-backend=…`) running in
 * a topology's node namespace, through `proxy_harness.ts`.
 *
 * @module
 */
import { type RunningProxy, startProxy, type StartProxyOptions } from "./proxy_harness.ts";
import type { RawObject } from "../../src/source/events.ts";
import type { IPFamily } from "../../src/model/service_port.ts";
import {
  applyIptables,
  type IptablesBackend,
  iptablesProgram,
  saveTables,
} from "../../src/apply/iptables.ts";
import type { SavedTables } from "../../src/render/iptables/reconcile.ts";
import { createNamespace, deleteNamespace, runOk, shortId } from "../netns/netns.ts";
import type { Topology } from "../netns/topology.ts";

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

/** Options of {@link startIptablesProxy}. */
export interface StartIptablesProxyOptions extends StartProxyOptions {
  /** Back end (`--iptables-backend`). Default `nft`. */
  backend?: IptablesBackend;
}

/**
 * Starts `main.ts --mode=iptables` (`--from-file`) in the node namespace, as {@link startProxy}
 * does, and waits for its first sync.
 */
export function startIptablesProxy(
  topo: Topology,
  objects: readonly RawObject[],
  options: StartIptablesProxyOptions = {},
): Promise<RunningProxy> {
  return startProxy(topo, objects, {
    ...options,
    args: [
      "--mode=iptables",
      `--iptables-backend=${options.backend ?? "nft"}`,
      "--iptables-min-sync-period=50ms",
      ...(options.args ?? []),
    ],
    // iptables-legacy waits for the xtables lock, which other namespaces' tests may hold.
    syncTimeoutMs: options.syncTimeoutMs ?? 30_000,
  });
}
