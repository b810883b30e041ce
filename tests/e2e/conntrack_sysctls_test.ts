/**
 * Spec of the connection-tracking settings the proxy makes at start-up, as kube-proxy does: in a
 * node namespace, the TCP timeouts become the configured ones (kube-proxy's defaults, or the
 * flags'), a 0 leaves the kernel's value, and the table size — which only the host's initial
 * namespace may change — is reported, not fatal, and the machine's own settings are untouched.
 *
 * @module
 */
import assert from "node:assert/strict";
import { node, serviceCIDR } from "../fixtures/objects.ts";
import { createNamespace, deleteNamespace, netnsTestGate, run, shortId } from "../netns/netns.ts";
import { cacheProxyDependencies, MAIN } from "./proxy_harness.ts";
import { stringify } from "./yaml.ts";

const gate = await netnsTestGate();
const SYSCTLS = "/proc/sys/net/netfilter";

async function sysctl(name: string, ns?: string): Promise<number> {
  const out = await run(["cat", `${SYSCTLS}/${name}`], { ns });
  return Number(out.stdout.trim());
}

Deno.test({
  name:
    "the proxy sets kube-proxy's conntrack timeouts in its namespace, leaves 0s alone, and survives a table size it may not set",
  ignore: gate.ignore,
  sanitizeResources: false,
  sanitizeOps: false,
  async fn() {
    await cacheProxyDependencies();
    const [first, second] = [`knp-${shortId()}-ct`, `knp-${shortId()}-ct`];
    const dir = await Deno.makeTempDir({ prefix: "knp-ct-" });
    const file = `${dir}/cluster.yaml`;
    await Deno.writeTextFile(
      file,
      stringify([node("node-a", { ips: ["192.168.50.2"] }), serviceCIDR("k", ["10.96.0.0/16"])]),
    );
    const hostMax = await sysctl("nf_conntrack_max");
    const hostEstablished = await sysctl("nf_conntrack_tcp_timeout_established");
    const proxy = async (ns: string, args: string[]) => {
      const out = await run([
        Deno.execPath(),
        "run",
        "--cached-only",
        "-A",
        MAIN,
        `--from-file=${file}`,
        "--hostname-override=node-a",
        "--once",
        ...args,
      ], { ns, timeoutMs: 60_000 });
      assert.equal(out.code, 0, out.stderr);
      return out.stderr;
    };
    try {
      await createNamespace(first);
      await createNamespace(second);
      const closeWaitBefore = await sysctl("nf_conntrack_tcp_timeout_close_wait", second);

      const log = await proxy(first, []);
      assert.equal(await sysctl("nf_conntrack_tcp_timeout_established", first), 86400, log);
      assert.equal(await sysctl("nf_conntrack_tcp_timeout_close_wait", first), 3600, log);
      assert.match(log, /conntrack: set nf_conntrack_tcp_timeout_established: \d+ → 86400/);
      assert.doesNotMatch(log, /conntrack: set nf_conntrack_max/, "only the host namespace may");

      await proxy(second, [
        "--conntrack-tcp-timeout-established=2h",
        "--conntrack-tcp-timeout-close-wait=0",
        "--conntrack-max-per-core=0",
      ]);
      assert.equal(await sysctl("nf_conntrack_tcp_timeout_established", second), 7200);
      assert.equal(await sysctl("nf_conntrack_tcp_timeout_close_wait", second), closeWaitBefore);

      assert.equal(await sysctl("nf_conntrack_max"), hostMax, "the machine's table is untouched");
      assert.equal(await sysctl("nf_conntrack_tcp_timeout_established"), hostEstablished);
    } finally {
      await deleteNamespace(first);
      await deleteNamespace(second);
      await Deno.remove(dir, { recursive: true });
    }
  },
});
