/**
 * The container image, run for real (`deno task image:test`, as root, after `deno task image`):
 * deploy/daemonset.yaml's container and deploy/sidecar-example.yaml's, run with podman as their
 * manifests say (args, a read-only config mount, NET_ADMIN alone, read-only root) in a network
 * namespace made for the test, against the test API server, program the Service's rules,
 * answer `/healthz` and end on SIGTERM within 5 s leaving the rules in place. The image's
 * `--from-file` run parses in its worker, and a path outside the image's permissions is a
 * one-line error.
 *
 * Ignored unless KNP_IMAGE_TEST=1 (the task sets it); the image is IMAGE_TAG, as `deno task image`
 * names it (default localhost/kube-nftproxy:<version>).
 *
 * @module
 */
import assert from "node:assert/strict";
import { fileURLToPath } from "node:url";
import { loadAll } from "js-yaml";
import { endpointSlice, node, service } from "../fixtures/objects.ts";
import { createNamespace, deleteNamespace, run, shortId } from "../netns/netns.ts";
import {
  type NamespacedApiServer,
  startNamespacedApiServer,
} from "../e2e/namespaced_api_server.ts";
import { VERSION } from "../../src/version.ts";
import { podmanRunArgs, podSpec } from "./pod_run.ts";

const IMAGE = Deno.env.get("IMAGE_TAG") || `localhost/kube-nftproxy:${VERSION}`;
const ignore = Deno.env.get("KNP_IMAGE_TEST") !== "1";
const DEPLOY = fileURLToPath(new URL("../../deploy/", import.meta.url));
const CLUSTER_FILE = fileURLToPath(
  new URL("../fixtures/file-source-cluster.yaml", import.meta.url),
);
const NODE_NAME = "node-a";
const SERVICE_IP = "10.96.0.10";
/** podman's global flags: crun, its default runtime, fails on these machines' cgroups. */
const PODMAN = ["podman", "--runtime", "runc"];
/** Bound on waits for the container to start and sync on a loaded machine, not a target. */
const START_MS = 60_000;

async function podman(args: readonly string[], timeoutMs = 30_000) {
  return await run([...PODMAN, ...args], { timeoutMs });
}

/** Polls `check` every 200 ms until it returns true; throws with `what` after `timeoutMs`. */
async function eventually(what: string, check: () => Promise<boolean>, timeoutMs = START_MS) {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`${what}: not within ${timeoutMs} ms`);
    await new Promise((r) => setTimeout(r, 200));
  }
}

/**
 * The `lib-modules` volume: the machine's /lib/modules, or an empty directory where it has none
 * (a container running these tests).
 */
async function libModules(dir: string): Promise<Record<string, string>> {
  try {
    await Deno.stat("/lib/modules");
    return {};
  } catch {
    await Deno.mkdir(`${dir}/lib-modules`, { recursive: true });
    return { "lib-modules": `${dir}/lib-modules` };
  }
}

/** deploy/configmap.yaml's two files. */
async function configMapFiles(): Promise<Record<string, string>> {
  const docs = loadAll(await Deno.readTextFile(`${DEPLOY}configmap.yaml`)) as {
    data: Record<string, string>;
  }[];
  return docs[0].data;
}

/** A kubeconfig for the test API server (the ConfigMap's points at a real control plane). */
function kubeconfig(server: string): string {
  return `apiVersion: v1
kind: Config
clusters:
  - name: test
    cluster: {server: "${server}"}
users:
  - name: kube-nftproxy
    user: {token: test-token}
contexts:
  - name: test
    context: {cluster: test, user: kube-nftproxy}
current-context: test
`;
}

/** A namespace, the test API server in it holding one Service, and a scratch directory. */
interface Node {
  ns: string;
  api: NamespacedApiServer;
  dir: string;
  ruleset(): Promise<string>;
}

async function withNode(fn: (node: Node) => Promise<void>): Promise<void> {
  const ns = `knp-img-${shortId()}`;
  const dir = await Deno.makeTempDir({ prefix: "knp-img-" });
  let api: NamespacedApiServer | undefined;
  await createNamespace(ns);
  try {
    api = await startNamespacedApiServer(ns);
    await api.create("Node", node(NODE_NAME, { ips: ["10.0.0.1"] }));
    await api.create("Service", service({ name: "web", clusterIPs: [SERVICE_IP] }));
    await api.create(
      "EndpointSlice",
      endpointSlice({
        name: "web-1",
        service: "web",
        endpoints: [{ ip: "10.244.1.2", nodeName: NODE_NAME }],
      }),
    );
    const ruleset = async () =>
      (await run(["nft", "list", "table", "ip", "kube-nftproxy"], { ns })).stdout;
    await fn({ ns, api, dir, ruleset });
  } finally {
    await api?.close();
    await podman(["rm", "--force", "--time", "0", ns]);
    await deleteNamespace(ns, { killProcesses: true });
    await Deno.remove(dir, { recursive: true });
  }
}

/**
 * Runs the manifest's container (its name is the namespace's) with the config directory `config`
 * as its `config` volume, waits for the Service's rules and `/healthz` 200, sends SIGTERM and
 * checks it ends within 5 s with the rules kept. Returns the container's log.
 */
async function runLikeTheManifest(
  { ns, api, dir, ruleset }: Node,
  manifest: string,
  config: string,
): Promise<string> {
  const pod = podSpec(await Deno.readTextFile(`${DEPLOY}${manifest}`));
  const lock = `${dir}/xtables.lock`;
  await Deno.writeTextFile(lock, "");
  const argv = podmanRunArgs(pod.containers[0], {
    image: IMAGE,
    name: ns,
    netns: ns,
    nodeName: NODE_NAME,
    volumes: { config, "xtables-lock": lock, ...await libModules(dir) },
    podVolumes: pod.volumes,
  });
  const started = await podman(argv);
  assert.equal(started.code, 0, started.stderr);
  const logs = async () => {
    const result = await podman(["logs", ns]);
    return result.stdout + result.stderr;
  };
  try {
    await eventually("the Service's rules", async () => (await ruleset()).includes(SERVICE_IP));
    await eventually("/healthz 200", async () => {
      const result = await api.fetch("http://127.0.0.1:10256/healthz");
      return "status" in result && result.status === 200;
    });
  } catch (error) {
    throw new Error(`${(error as Error).message}; the container's log:\n${await logs()}`);
  }

  // The image may call libc (FFI for that one file): the kernel is asked over netlink, and the
  // first full sync did not fall back to nft -f.
  const early = await logs();
  assert.match(early, /asking the kernel over netlink/);
  assert.doesNotMatch(early, /not over netlink/);
  const metrics = await api.fetch("http://127.0.0.1:10249/metrics");
  assert.ok("body" in metrics && metrics.status === 200, JSON.stringify(metrics));
  assert.match(metrics.body, /^kubenftproxy_service_connections_total\{[^}]*service="web"/m);

  const before = await ruleset();
  const stopping = Date.now();
  assert.equal((await podman(["kill", "--signal", "TERM", ns])).code, 0);
  const waited = await podman(["wait", ns], 15_000);
  const stoppedMs = Date.now() - stopping;
  const log = await logs();
  assert.equal(waited.stdout.trim(), "0", `exit status; the log:\n${log}`);
  assert.ok(stoppedMs <= 5000, `SIGTERM took ${stoppedMs} ms to end it`);
  assert.match(log, /shutting down; rules stay in the kernel/);
  assert.equal(await ruleset(), before, "the rules changed when the proxy stopped");
  return log;
}

Deno.test({
  name:
    "image: deploy/daemonset.yaml's container, NET_ADMIN only and read-only, programs the Service, answers /healthz and stops on SIGTERM within 5 s keeping the rules",
  ignore,
  sanitizeResources: false,
  sanitizeOps: false,
  async fn() {
    await withNode(async (node) => {
      const config = `${node.dir}/config`;
      await Deno.mkdir(config);
      const files = await configMapFiles();
      await Deno.writeTextFile(`${config}/config.conf`, files["config.conf"]);
      await Deno.writeTextFile(`${config}/kubeconfig.conf`, kubeconfig(node.api.url));
      const log = await runLikeTheManifest(node, "daemonset.yaml", config);
      assert.match(
        log,
        new RegExp(`watching the API server at ${node.api.url} for node ${NODE_NAME}`),
      );
      // The ConfigMap's conntrack settings cannot be made without --allow-all: one warning each.
      assert.match(log, /conntrack: cannot read nf_conntrack_max/);
    });
  },
});

Deno.test({
  name:
    "image: deploy/sidecar-example.yaml's static pod, from its own config and kubeconfig files, programs the Service and stops on SIGTERM within 5 s keeping the rules",
  ignore,
  sanitizeResources: false,
  sanitizeOps: false,
  async fn() {
    await withNode(async (node) => {
      const config = `${node.dir}/etc-kube-nftproxy`;
      await Deno.mkdir(config);
      const files = await configMapFiles();
      await Deno.writeTextFile(`${config}/config.conf`, files["config.conf"]);
      await Deno.writeTextFile(`${config}/kubeconfig.conf`, kubeconfig(node.api.url));
      const log = await runLikeTheManifest(node, "sidecar-example.yaml", config);
      assert.match(log, /watching the API server/);
    });
  },
});

/**
 * Runs the sidecar example's container once with `args` and the cluster fixture at
 * /etc/kube-nftproxy/cluster.yaml; resolves with its log once it exited 0.
 */
async function runOnce({ ns, dir }: Node, args: readonly string[]): Promise<string> {
  const config = `${dir}/files`;
  await Deno.mkdir(config);
  await Deno.copyFile(CLUSTER_FILE, `${config}/cluster.yaml`);
  await Deno.writeTextFile(`${dir}/xtables.lock`, "");
  const pod = podSpec(await Deno.readTextFile(`${DEPLOY}sidecar-example.yaml`));
  const argv = podmanRunArgs(pod.containers[0], {
    image: IMAGE,
    name: ns,
    netns: ns,
    nodeName: NODE_NAME,
    volumes: { config, "xtables-lock": `${dir}/xtables.lock`, ...await libModules(dir) },
    podVolumes: pod.volumes,
    args: [
      "--from-file=/etc/kube-nftproxy/cluster.yaml",
      `--hostname-override=${NODE_NAME}`,
      ...args,
    ],
  });
  const started = await podman(argv);
  assert.equal(started.code, 0, started.stderr);
  const waited = await podman(["wait", ns], START_MS);
  const log = (await podman(["logs", ns])).stderr;
  assert.equal(waited.stdout.trim(), "0", log);
  return log;
}

/** The fixture's ClusterIPs (tests/fixtures/file-source-cluster.yaml). */
async function fixtureClusterIPs(): Promise<string[]> {
  const ips = [...(await Deno.readTextFile(CLUSTER_FILE)).matchAll(/clusterIP: (\S+)/g)]
    .map((m) => m[1]);
  assert.ok(ips.length > 0);
  return ips;
}

Deno.test({
  name: "image: --from-file parses the cluster file in its worker, inside the image",
  ignore,
  sanitizeResources: false,
  sanitizeOps: false,
  async fn() {
    await withNode(async (node) => {
      const log = await runOnce(node, ["--once"]);
      assert.doesNotMatch(log, /cannot start a worker/);
      const rules = await node.ruleset();
      for (const ip of await fixtureClusterIPs()) {
        assert.ok(rules.includes(ip), `${ip} not in the rules:\n${rules}`);
      }
    });
  },
});

Deno.test({
  name:
    "image: --mode=iptables programs KUBE-SERVICES with the image's iptables, within its permissions",
  ignore,
  sanitizeResources: false,
  sanitizeOps: false,
  async fn() {
    await withNode(async (node) => {
      await runOnce(node, ["--mode=iptables", "--once"]);
      const saved = await run(["iptables-save", "-t", "nat"], { ns: node.ns });
      assert.equal(saved.code, 0, saved.stderr);
      for (const ip of await fixtureClusterIPs()) {
        assert.match(
          saved.stdout,
          new RegExp(`-A KUBE-SERVICES -d ${ip.replaceAll(".", "\\.")}/32`),
        );
      }
    });
  },
});

Deno.test({
  name:
    "image: a config file outside the paths the image may read is one line saying so, exit status 2",
  ignore,
  sanitizeResources: false,
  sanitizeOps: false,
  async fn() {
    const dir = await Deno.makeTempDir({ prefix: "knp-img-" });
    try {
      await Deno.writeTextFile(`${dir}/config.conf`, (await configMapFiles())["config.conf"]);
      const result = await podman([
        "run",
        "--rm",
        "--network",
        "none",
        "--ulimit",
        "nofile=1024:1024",
        "--ulimit",
        "nproc=1024:1024",
        "--cap-drop",
        "ALL",
        "--read-only",
        "--volume",
        `${dir}:/srv/proxy:ro`,
        IMAGE,
        "--config=/srv/proxy/config.conf",
      ]);
      assert.equal(result.code, 2, result.stderr);
      assert.equal(
        result.stderr.trimEnd(),
        'kube-nftproxy: config /srv/proxy/config.conf: cannot read: Requires read access to "/srv/proxy/config.conf", run again with the --allow-read flag',
      );
    } finally {
      await Deno.remove(dir, { recursive: true });
    }
  },
});

Deno.test({
  name:
    "image: the proxy runs no program outside its list: a KUBE_NFTPROXY_NFT of /bin/sh is refused in one line",
  ignore,
  sanitizeResources: false,
  sanitizeOps: false,
  async fn() {
    const result = await podman([
      "run",
      "--rm",
      "--network",
      "none",
      "--ulimit",
      "nofile=1024:1024",
      "--ulimit",
      "nproc=1024:1024",
      "--cap-drop",
      "ALL",
      "--read-only",
      "--env",
      "KUBE_NFTPROXY_NFT=/bin/sh",
      IMAGE,
      "--cleanup",
    ]);
    assert.equal(result.code, 2, result.stderr);
    assert.equal(
      result.stderr.trimEnd(),
      'kube-nftproxy: cannot run /bin/sh: Requires run access to "/bin/sh", run again with the --allow-run flag',
    );
  },
});
