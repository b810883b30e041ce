/**
 * Throwaway network namespaces for script tests: every rendered script a test produces is also
 * loaded into a real kernel, so no test relies on text comparison alone.
 *
 * @module
 */
import { applyNft, runNft } from "../src/apply/nft.ts";
import { createNamespace, deleteNamespace, netnsTestGate, shortId } from "./netns/netns.ts";

/** A scratch namespace: `load` applies a script there, `list` prints a table. */
export interface Scratch {
  readonly ns: string;
  load(script: string): Promise<void>;
  list(family: "ip" | "ip6", table?: string): Promise<string>;
  /**
   * Runs `code` (a module body) with Deno inside the namespace and returns what it printed:
   * for code whose sockets must belong to the namespace, as netlink's do.
   */
  evaluate(code: string): Promise<string>;
}

/** The gate for tests that need a kernel (skipped without root/nft, failing under CI=true). */
export const kernelGate = await netnsTestGate();

/** Runs `fn` with a fresh namespace, always removed afterwards. */
export async function withScratch<T>(fn: (scratch: Scratch) => Promise<T>): Promise<T> {
  kernelGate.assertUsable();
  const ns = `knp-${shortId()}-scratch`;
  await createNamespace(ns);
  try {
    return await fn({
      ns,
      load: (script) => applyNft(script, { netns: ns }),
      list: async (family, table = "kube-nftproxy") => {
        const out = await runNft(["list", "table", family, table], { netns: ns });
        if (out.code !== 0) throw new Error(out.stderr);
        return out.stdout;
      },
      evaluate: async (code) => {
        const out = await new Deno.Command("ip", {
          args: ["netns", "exec", ns, Deno.execPath(), "eval", code],
          stdout: "piped",
          stderr: "piped",
        }).output();
        const decoder = new TextDecoder();
        if (!out.success) throw new Error(decoder.decode(out.stderr));
        return decoder.decode(out.stdout);
      },
    });
  } finally {
    await deleteNamespace(ns);
  }
}
