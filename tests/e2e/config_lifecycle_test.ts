/**
 * End-to-end specs of the configuration's life in a real process, each in a network namespace
 * of its own: a hand-written v1alpha1 file with removed fields, an `ipvs:` block and a duplicate
 * key starts the proxy with one warning; a change of that file ends the daemon with one line and
 * a non-zero code, as upstream, so its pod restarts with the new ConfigMap; `--init-only` makes
 * the privileged start-up settings and exits without touching the ruleset; the size limits
 * given as flags reach the sources; and `--iptables-sync-period` drives nft mode's syncs.
 *
 * @module
 */
import assert from "node:assert/strict";
import { node, serviceCIDR } from "../fixtures/objects.ts";
import {
  createNamespace,
  deleteNamespace,
  netnsTestGate,
  run,
  shortId,
  startProcess,
} from "../netns/netns.ts";
import { cacheProxyDependencies, MAIN } from "./proxy_harness.ts";
import { stringify } from "./yaml.ts";

const gate = await netnsTestGate();

/** A file as an install guide of some years ago writes it: removed fields, ipvs, a repeated key. */
const GUIDE_CONFIG = [
  "apiVersion: kubeproxy.config.k8s.io/v1alpha1",
  "kind: KubeProxyConfiguration",
  "bindAddress: 0.0.0.0",
  "clusterCIDR: 10.244.0.0/16",
  "udpIdleTimeout: 250ms",
  "resourceContainer: /kube-proxy",
  "ipvs:",
  "  minSyncPeriod: 0s",
  "  scheduler: rr",
  "  syncPeriod: 30s",
  "metricsBindAddress: 127.0.0.1:10249",
  "metricsBindAddress: 127.0.0.1:10249",
  'mode: ""',
  "",
].join("\n");

/** The proxy's command line: deno from its cache, with `args`. */
function proxyCommand(args: string[]): string[] {
  return [Deno.execPath(), "run", "--cached-only", "-A", MAIN, ...args];
}

/** A namespace and a directory for one test, both removed after `body`, even on failure. */
async function withNamespace(
  body: (ns: string, dir: string) => Promise<void>,
): Promise<void> {
  gate.assertUsable();
  await cacheProxyDependencies();
  const ns = `knp-cfg-${shortId()}`;
  const dir = await Deno.makeTempDir({ prefix: "knp-cfg-" });
  try {
    await createNamespace(ns);
    await Deno.writeTextFile(
      `${dir}/cluster.yaml`,
      stringify([node("node-a", { ips: ["192.168.50.2"] }), serviceCIDR("k", ["10.96.0.0/16"])]),
    );
    await body(ns, dir);
  } finally {
    await deleteNamespace(ns, { killProcesses: true });
    await Deno.remove(dir, { recursive: true });
  }
}

/** Resolves with the process's status, or undefined when it is still running after `ms`. */
async function exitWithin(
  status: Promise<Deno.CommandStatus>,
  ms: number,
): Promise<Deno.CommandStatus | undefined> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const timeout = new Promise<undefined>((resolve) => {
    timer = setTimeout(() => resolve(undefined), ms);
  });
  try {
    return await Promise.race([status, timeout]);
  } finally {
    clearTimeout(timer);
  }
}

Deno.test({
  name:
    "the daemon starts from an old install guide's file with one lenient-decoding warning, and exits with one line when the file changes",
  ignore: gate.ignore,
  sanitizeResources: false,
  sanitizeOps: false,
  async fn() {
    await withNamespace(async (ns, dir) => {
      // A ConfigMap volume's layout: config.conf → ..data/config.conf, ..data → a dated dir.
      await Deno.mkdir(`${dir}/..2026_11_25_1`);
      await Deno.writeTextFile(`${dir}/..2026_11_25_1/config.conf`, GUIDE_CONFIG);
      await Deno.symlink("..2026_11_25_1", `${dir}/..data`);
      await Deno.symlink("..data/config.conf", `${dir}/config.conf`);
      const proxy = startProcess(
        proxyCommand([
          `--from-file=${dir}/cluster.yaml`,
          `--config=${dir}/config.conf`,
          "--hostname-override=node-a",
        ]),
        { ns, env: { DENO_NO_UPDATE_CHECK: "1", NO_COLOR: "1" } },
      );
      try {
        await proxy.waitForOutput(/first sync timing/, 60_000);
        const lenient = proxy.output().split("\n").filter((line) =>
          line.includes("using lenient decoding as strict decoding failed")
        );
        assert.equal(lenient.length, 1, proxy.output());
        assert.match(
          lenient[0],
          // klog quotes the message: its double quotes are escaped.
          /duplicate field \\"metricsBindAddress\\" \(line 12\), unknown field \\"udpIdleTimeout\\", unknown field \\"resourceContainer\\"/,
        );

        // The kubelet's update: a new dated directory, then ..data swapped to it.
        await Deno.mkdir(`${dir}/..2026_11_25_2`);
        await Deno.writeTextFile(
          `${dir}/..2026_11_25_2/config.conf`,
          GUIDE_CONFIG.replace("10.244.0.0/16", "10.245.0.0/16"),
        );
        await Deno.symlink("..2026_11_25_2", `${dir}/..data_tmp`);
        await Deno.rename(`${dir}/..data_tmp`, `${dir}/..data`);
        const status = await exitWithin(proxy.status, 20_000);
        assert.ok(status !== undefined, `still running 20 s after the change:\n${proxy.output()}`);
        assert.equal(status.code, 1, proxy.output());
        const updated = proxy.output().split("\n").filter((line) => line.includes("was updated"));
        assert.equal(updated.length, 1, proxy.output());
        assert.match(
          updated[0],
          new RegExp(`configuration file ${dir}/config.conf was updated: exiting to load it`),
        );
      } finally {
        await proxy.stop();
      }
    });
  },
});

Deno.test({
  name: "a wrong type in the config file still stops start-up, naming the field",
  ignore: gate.ignore,
  sanitizeResources: false,
  sanitizeOps: false,
  async fn() {
    await withNamespace(async (ns, dir) => {
      await Deno.writeTextFile(
        `${dir}/config.conf`,
        GUIDE_CONFIG.replace("clusterCIDR: 10.244.0.0/16", "clusterCIDR: [10.244.0.0/16]"),
      );
      const out = await run(
        proxyCommand([
          `--from-file=${dir}/cluster.yaml`,
          `--config=${dir}/config.conf`,
          "--hostname-override=node-a",
          "--once",
        ]),
        { ns, timeoutMs: 60_000 },
      );
      assert.equal(out.code, 2, out.stderr);
      assert.match(out.stderr, /clusterCIDR is \["10.244.0.0\/16"\], must be a string/);
      const tables = await run(["nft", "list", "tables"], { ns });
      assert.doesNotMatch(tables.stdout, /kube-nftproxy/);
    });
  },
});

Deno.test({
  name: "--init-only sets the conntrack timeouts and exits 0 without a ruleset, source or server",
  ignore: gate.ignore,
  sanitizeResources: false,
  sanitizeOps: false,
  async fn() {
    await withNamespace(async (ns) => {
      const out = await run(
        proxyCommand([
          "--init-only",
          "--conntrack-tcp-timeout-established=3h",
          "--conntrack-tcp-timeout-close-wait=30m",
          "--hostname-override=node-a",
          // Nothing is read: an API server that does not exist is never asked.
          "--master=https://192.0.2.1:6443",
        ]),
        { ns, timeoutMs: 60_000 },
      );
      assert.equal(out.code, 0, out.stderr);
      assert.match(out.stderr, /--init-only: initialization done, exiting/);
      const sysctl = async (name: string) =>
        Number((await run(["cat", `/proc/sys/net/netfilter/${name}`], { ns })).stdout.trim());
      assert.equal(await sysctl("nf_conntrack_tcp_timeout_established"), 10_800);
      assert.equal(await sysctl("nf_conntrack_tcp_timeout_close_wait"), 1_800);
      const tables = await run(["nft", "list", "tables"], { ns });
      assert.equal(tables.stdout.trim(), "", "no table is created");
    });
  },
});

Deno.test({
  name: "--max-cluster-file-bytes reaches the file source: a larger file is refused",
  ignore: gate.ignore,
  sanitizeResources: false,
  sanitizeOps: false,
  async fn() {
    await withNamespace(async (ns, dir) => {
      const args = [`--from-file=${dir}/cluster.yaml`, "--hostname-override=node-a", "--once"];
      const small = await run(proxyCommand([...args, "--max-cluster-file-bytes=100"]), {
        ns,
        timeoutMs: 60_000,
      });
      assert.notEqual(small.code, 0);
      assert.match(small.stderr, /larger than 100 bytes/);
      const large = await run(proxyCommand([...args, "--max-cluster-file-bytes=1Mi"]), {
        ns,
        timeoutMs: 60_000,
      });
      assert.equal(large.code, 0, large.stderr);
    });
  },
});

Deno.test({
  name:
    "--iptables-sync-period sets the sync period in nft mode, as upstream: an idle daemon re-syncs every second",
  ignore: gate.ignore,
  sanitizeResources: false,
  sanitizeOps: false,
  async fn() {
    await withNamespace(async (ns, dir) => {
      const proxy = startProcess(
        proxyCommand([
          `--from-file=${dir}/cluster.yaml`,
          "--hostname-override=node-a",
          "--iptables-sync-period=1s",
          "--iptables-min-sync-period=0s",
          "-v=4",
        ]),
        { ns, env: { DENO_NO_UPDATE_CHECK: "1", NO_COLOR: "1" } },
      );
      try {
        await proxy.waitForOutput(/first sync timing/, 60_000);
        const syncs = () => proxy.output().match(/synced (fully|partially):/g)?.length ?? 0;
        const first = syncs();
        // With the default 30 s period nothing would sync in this window; a second each here.
        // Bounded wait, generous for a loaded machine: 3 syncs within 20 s.
        const deadline = Date.now() + 20_000;
        while (syncs() < first + 3 && Date.now() < deadline) {
          await new Promise((r) => setTimeout(r, 200));
        }
        assert.ok(syncs() >= first + 3, `only ${syncs() - first} syncs:\n${proxy.output()}`);
        assert.match(proxy.output(), /mode nft/);
      } finally {
        await proxy.stop();
      }
    });
  },
});
