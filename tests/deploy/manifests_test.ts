/**
 * The manifests in `deploy/`, parsed and checked for what an operator relies on: the DaemonSet
 * replaces kube-proxy's (host network, priority, tolerations, xtables lock, kernel modules,
 * probes on the health server's port), its command line and ConfigMap load with the proxy's own
 * parser, it holds NET_ADMIN and nothing else, and RBAC grants exactly the reads and Event
 * writes the proxy needs. `kubectl kustomize` builds the base and the optional --init-only
 * component (deploy/overlays/init-only).
 *
 * @module
 */
import assert from "node:assert/strict";
import { relative } from "node:path";
import { fileURLToPath } from "node:url";
import { loadAll } from "js-yaml";
import { parseCommandLine } from "../../src/config/flags.ts";
import { VERSION } from "../../src/version.ts";

const DEPLOY = fileURLToPath(new URL("../../deploy/", import.meta.url));
const NODE = "node-1";

/** The fields of Kubernetes objects these tests read; everything is optional as in YAML. */
interface K8sObject {
  apiVersion?: string;
  kind?: string;
  metadata?: { name?: string; namespace?: string; labels?: Record<string, string> };
  data?: Record<string, string>;
  spec?: {
    selector?: { matchLabels?: Record<string, string> };
    updateStrategy?: { type?: string };
    template?: { metadata?: { labels?: Record<string, string> }; spec?: PodSpec };
  } & PodSpec;
  rules?: PolicyRule[];
  roleRef?: { apiGroup?: string; kind?: string; name?: string };
  subjects?: { kind?: string; name?: string; namespace?: string; apiGroup?: string }[];
  resources?: string[];
}

interface PodSpec {
  initContainers?: Container[];
  hostNetwork?: boolean;
  priorityClassName?: string;
  serviceAccountName?: string;
  nodeSelector?: Record<string, string>;
  tolerations?: Record<string, string>[];
  containers?: Container[];
  volumes?: Volume[];
}

interface Container {
  name?: string;
  image?: string;
  args?: string[];
  command?: string[];
  env?: { name: string; value?: string; valueFrom?: { fieldRef?: { fieldPath?: string } } }[];
  livenessProbe?: Probe;
  readinessProbe?: Probe;
  securityContext?: {
    privileged?: boolean;
    allowPrivilegeEscalation?: boolean;
    runAsUser?: number;
    capabilities?: { add?: string[]; drop?: string[] };
  };
  volumeMounts?: { name: string; mountPath: string; readOnly?: boolean }[];
}

interface Probe {
  httpGet?: { path?: string; port?: number | string };
}

interface Volume {
  name: string;
  configMap?: { name?: string };
  hostPath?: { path?: string; type?: string };
  emptyDir?: Record<string, unknown>;
}

interface PolicyRule {
  apiGroups?: string[];
  resources?: string[];
  verbs?: string[];
  resourceNames?: string[];
  nonResourceURLs?: string[];
}

/** Every document of every `deploy/*.yaml`, by file name. */
async function loadManifests(): Promise<Map<string, K8sObject[]>> {
  const files = new Map<string, K8sObject[]>();
  for await (const entry of Deno.readDir(DEPLOY)) {
    if (!entry.isFile || !/\.ya?ml$/.test(entry.name)) continue;
    const text = await Deno.readTextFile(`${DEPLOY}${entry.name}`);
    files.set(entry.name, loadAll(text).filter((doc) => doc != null) as K8sObject[]);
  }
  return files;
}

const manifests = await loadManifests();
const all = [...manifests.values()].flat();

function only(file: string, kind: string): K8sObject {
  const found = (manifests.get(file) ?? []).filter((doc) => doc.kind === kind);
  assert.equal(found.length, 1, `${file}: expected one ${kind}, found ${found.length}`);
  return found[0];
}

const daemonSet = only("daemonset.yaml", "DaemonSet");
const staticPod = only("sidecar-example.yaml", "Pod");
const configMap = only("configmap.yaml", "ConfigMap");
const podSpec = daemonSet.spec?.template?.spec ?? {};
const container = podSpec.containers?.[0] ?? {};
const staticContainer = staticPod.spec?.containers?.[0] ?? {};

/**
 * What the container's command line means to the proxy: `$(VAR)` references expanded as the
 * kubelet does (fieldRef `spec.nodeName` → {@link NODE}), and files read from the container's
 * mounts, with ConfigMap volumes served from `deploy/` and `files` standing in for host paths.
 */
function commandLineOf(
  spec: PodSpec,
  box: Container,
  hostFiles: Record<string, string> = {},
) {
  const env: Record<string, string> = {};
  for (const variable of box.env ?? []) {
    const field = variable.valueFrom?.fieldRef?.fieldPath;
    env[variable.name] = field === "spec.nodeName" ? NODE : variable.value ?? "";
  }
  const args = (box.args ?? []).map((arg) =>
    arg.replace(/\$\(([A-Za-z_][A-Za-z0-9_]*)\)/g, (ref, name: string) => env[name] ?? ref)
  );
  const files = new Map<string, string>();
  for (const mount of box.volumeMounts ?? []) {
    const volume = spec.volumes?.find((v) => v.name === mount.name);
    const source = volume?.configMap?.name !== undefined
      ? all.find((doc) => doc.kind === "ConfigMap" && doc.metadata?.name === volume.configMap?.name)
        ?.data ?? {}
      : volume?.hostPath?.path !== undefined
      ? Object.fromEntries(
        Object.entries(hostFiles).filter(([path]) => path.startsWith(`${volume.hostPath?.path}/`))
          .map(([path, text]) => [path.slice(`${volume.hostPath?.path}/`.length), text]),
      )
      : {};
    for (const [key, text] of Object.entries(source)) files.set(`${mount.mountPath}/${key}`, text);
  }
  return {
    args,
    files,
    parsed: parseCommandLine(args, {
      readFile: (path) => {
        const text = files.get(path);
        return text === undefined
          ? Promise.reject(new Deno.errors.NotFound(`${path} is not mounted`))
          : Promise.resolve(text);
      },
      env: (name) => env[name],
      hostname: () => "the-host-name-must-not-be-used",
    }),
  };
}

/** A probe's `httpGet.port` when it is a number (the manifests name no ports in probes). */
function probePort(probe: Probe | undefined): number | undefined {
  const port = probe?.httpGet?.port;
  return typeof port === "number" ? port : undefined;
}

Deno.test("deploy/ manifests each parse as YAML into Kubernetes objects with an apiVersion, a kind and a name", () => {
  assert.deepEqual([...manifests.keys()].sort(), [
    "configmap.yaml",
    "daemonset.yaml",
    "kustomization.yaml",
    "rbac.yaml",
    "sidecar-example.yaml",
  ]);
  for (const [file, docs] of manifests) {
    assert.ok(docs.length > 0, `${file} is empty`);
    for (const doc of docs) {
      assert.match(doc.apiVersion ?? "", /^[a-z0-9.]*\/?v\d+(?:(?:alpha|beta)\d+)?$/, file);
      assert.match(doc.kind ?? "", /^[A-Z][A-Za-z]+$/, file);
      if (doc.kind !== "Kustomization") assert.ok(doc.metadata?.name, `${file}: ${doc.kind}`);
    }
  }
});

Deno.test("deploy/kustomization.yaml installs the RBAC, the ConfigMap and the DaemonSet, not the static pod example", () => {
  const kustomization = only("kustomization.yaml", "Kustomization");
  assert.deepEqual(kustomization.resources, ["rbac.yaml", "configmap.yaml", "daemonset.yaml"]);
});

Deno.test("every deploy/ container runs this repository's image at its version, never latest", () => {
  const containers = all.flatMap((doc) =>
    doc.spec?.template?.spec?.containers ?? doc.spec?.containers ?? []
  );
  assert.equal(containers.length, 2);
  for (const box of containers) {
    assert.equal(box.image, `kube-nftproxy:${VERSION}`);
    assert.equal(box.command, undefined, "the image's ENTRYPOINT is the binary; only args");
  }
});

Deno.test("DaemonSet runs in the host network at system-node-critical on every Linux node, whatever its taints, rolling one node at a time", () => {
  assert.equal(daemonSet.apiVersion, "apps/v1");
  assert.equal(daemonSet.metadata?.namespace, "kube-system");
  assert.equal(podSpec.hostNetwork, true);
  assert.equal(podSpec.priorityClassName, "system-node-critical");
  assert.deepEqual(podSpec.tolerations, [{ operator: "Exists" }]);
  assert.deepEqual(podSpec.nodeSelector, { "kubernetes.io/os": "linux" });
  assert.equal(daemonSet.spec?.updateStrategy?.type, "RollingUpdate");
  const selector = daemonSet.spec?.selector?.matchLabels ?? {};
  const labels = daemonSet.spec?.template?.metadata?.labels ?? {};
  assert.ok(Object.keys(selector).length > 0);
  for (const [key, value] of Object.entries(selector)) assert.equal(labels[key], value, key);
});

Deno.test("DaemonSet's command line loads with the proxy's own parser against the ConfigMap it mounts: nft mode, node name from the downward API, kubeconfig mounted", async () => {
  assert.deepEqual(container.args, [
    "--config=/var/lib/kube-proxy/config.conf",
    "--hostname-override=$(NODE_NAME)",
  ]);
  const { files, parsed } = commandLineOf(podSpec, container);
  const { config, actions } = await parsed;
  assert.equal(config.mode, "nft");
  assert.equal(config.hostname, NODE);
  assert.deepEqual(config.clusterCIDRs, ["10.244.0.0/16"]);
  assert.equal(config.kubeconfig, "/var/lib/kube-proxy/kubeconfig.conf");
  assert.ok(files.has(config.kubeconfig), "the kubeconfig the config names is mounted");
  assert.equal(config.fromFile, "");
  assert.deepEqual(
    Object.entries(actions).filter(([name, on]) => name !== "output" && on !== false && on !== ""),
    [],
    "the daemon runs: no one-shot action",
  );
});

Deno.test("DaemonSet probes liveness on /livez and readiness on /healthz at the port the health server binds", async () => {
  const { config } = await commandLineOf(podSpec, container).parsed;
  const healthPort = Number(config.healthzBindAddress.split(":").pop());
  assert.equal(healthPort, 10256);
  assert.equal(container.livenessProbe?.httpGet?.path, "/livez");
  assert.equal(container.readinessProbe?.httpGet?.path, "/healthz");
  assert.equal(probePort(container.livenessProbe), healthPort);
  assert.equal(probePort(container.readinessProbe), healthPort);
});

Deno.test("DaemonSet's container holds NET_ADMIN and no other capability, unprivileged", () => {
  const security = container.securityContext ?? {};
  assert.deepEqual(security.capabilities, { add: ["NET_ADMIN"], drop: ["ALL"] });
  assert.equal(security.privileged, false);
  assert.equal(security.allowPrivilegeEscalation, false);
  assert.equal(security.runAsUser, 0, "netfilter in the host namespace needs root");
});

Deno.test("DaemonSet mounts the config read-only, the host's /run/xtables.lock and /lib/modules read-only, and nothing it does not declare", () => {
  const mounts = Object.fromEntries(
    (container.volumeMounts ?? []).map((m) => [m.mountPath, m]),
  );
  const volume = (name: string | undefined) => podSpec.volumes?.find((v) => v.name === name);
  assert.deepEqual(volume(mounts["/var/lib/kube-proxy"]?.name)?.configMap, {
    name: configMap.metadata?.name,
  });
  assert.equal(mounts["/var/lib/kube-proxy"].readOnly, true);
  assert.deepEqual(volume(mounts["/run/xtables.lock"]?.name)?.hostPath, {
    path: "/run/xtables.lock",
    type: "FileOrCreate",
  });
  assert.equal(volume(mounts["/lib/modules"]?.name)?.hostPath?.path, "/lib/modules");
  assert.equal(mounts["/lib/modules"].readOnly, true);
  const mounted = new Set(Object.values(mounts).map((m) => m.name));
  assert.deepEqual(
    (podSpec.volumes ?? []).map((v) => v.name).filter((name) => !mounted.has(name)),
    [],
    "every volume is mounted",
  );
});

/** RBAC rules flattened to `group/resource:verb` (core group as ""). */
function grants(rules: readonly PolicyRule[]): string[] {
  return rules.flatMap((rule) =>
    (rule.apiGroups ?? []).flatMap((group) =>
      (rule.resources ?? []).flatMap((resource) =>
        (rule.verbs ?? []).map((verb) => `${group}/${resource}:${verb}`)
      )
    )
  ).sort();
}

Deno.test("ClusterRole grants exactly get/list/watch on services, nodes, endpointslices and servicecidrs and create/patch on events, with no wildcard", () => {
  const role = only("rbac.yaml", "ClusterRole");
  const read = ["get", "list", "watch"];
  const expected = [
    ...read.map((verb) => `/services:${verb}`),
    ...read.map((verb) => `/nodes:${verb}`),
    ...read.map((verb) => `discovery.k8s.io/endpointslices:${verb}`),
    ...read.map((verb) => `networking.k8s.io/servicecidrs:${verb}`),
    "/events:create",
    "/events:patch",
    "events.k8s.io/events:create",
    "events.k8s.io/events:patch",
  ].sort();
  assert.deepEqual(grants(role.rules ?? []), expected);
  for (const rule of role.rules ?? []) {
    assert.equal(rule.resourceNames, undefined);
    assert.equal(rule.nonResourceURLs, undefined);
    for (const list of [rule.apiGroups, rule.resources, rule.verbs]) {
      assert.equal(list?.includes("*"), false);
    }
  }
  const writes = grants(role.rules ?? []).filter((grant) =>
    !grant.includes("/events:") && !/:(get|list|watch)$/.test(grant)
  );
  assert.deepEqual(writes, [], "no write verb on a watched resource");
});

Deno.test("ClusterRoleBinding gives the ClusterRole to the DaemonSet's service account", () => {
  const account = only("rbac.yaml", "ServiceAccount");
  const binding = only("rbac.yaml", "ClusterRoleBinding");
  const role = only("rbac.yaml", "ClusterRole");
  assert.equal(podSpec.serviceAccountName, account.metadata?.name);
  assert.equal(account.metadata?.namespace, daemonSet.metadata?.namespace);
  assert.deepEqual(binding.roleRef, {
    apiGroup: "rbac.authorization.k8s.io",
    kind: "ClusterRole",
    name: role.metadata?.name,
  });
  assert.deepEqual(binding.subjects, [
    {
      kind: "ServiceAccount",
      name: account.metadata?.name,
      namespace: account.metadata?.namespace,
    },
  ]);
});

Deno.test("ConfigMap is kubeadm's shape: config.conf, a KubeProxyConfiguration naming the mounted kubeconfig.conf", () => {
  assert.deepEqual(Object.keys(configMap.data ?? {}).sort(), ["config.conf", "kubeconfig.conf"]);
  const [config] = loadAll(configMap.data?.["config.conf"] ?? "") as {
    apiVersion?: string;
    kind?: string;
    clientConnection?: { kubeconfig?: string };
  }[];
  assert.equal(config.apiVersion, "kubeproxy.config.k8s.io/v1alpha1");
  assert.equal(config.kind, "KubeProxyConfiguration");
  assert.equal(config.clientConnection?.kubeconfig, "/var/lib/kube-proxy/kubeconfig.conf");
  const [kubeconfig] = loadAll(configMap.data?.["kubeconfig.conf"] ?? "") as {
    kind?: string;
    clusters?: { cluster?: { server?: string } }[];
  }[];
  assert.equal(kubeconfig.kind, "Config");
  assert.match(kubeconfig.clusters?.[0]?.cluster?.server ?? "", /^https:\/\//);
});

Deno.test("static pod example runs the same proxy from host files: host network, node-critical, NET_ADMIN only, probes on /livez and /healthz", async () => {
  const spec = staticPod.spec ?? {};
  assert.equal(staticPod.apiVersion, "v1");
  assert.equal(spec.hostNetwork, true);
  assert.equal(spec.priorityClassName, "system-node-critical");
  assert.equal(spec.serviceAccountName, undefined, "static pods cannot use service accounts");
  assert.equal(
    spec.volumes?.some((v) => v.configMap !== undefined),
    false,
    "static pods cannot mount ConfigMaps",
  );
  assert.deepEqual(staticContainer.securityContext, container.securityContext);
  assert.equal(staticContainer.livenessProbe?.httpGet?.path, "/livez");
  assert.equal(staticContainer.readinessProbe?.httpGet?.path, "/healthz");
  const { config } = await commandLineOf(spec, staticContainer, {
    "/etc/kube-nftproxy/config.conf": configMap.data?.["config.conf"] ?? "",
    "/etc/kube-nftproxy/kubeconfig.conf": configMap.data?.["kubeconfig.conf"] ?? "",
  }).parsed;
  assert.equal(config.hostname, NODE);
  assert.equal(config.kubeconfig, "/etc/kube-nftproxy/kubeconfig.conf");
  const port = Number(config.healthzBindAddress.split(":").pop());
  assert.equal(probePort(staticContainer.livenessProbe), port);
  assert.equal(probePort(staticContainer.readinessProbe), port);
  const mounts = new Map((staticContainer.volumeMounts ?? []).map((m) => [m.mountPath, m]));
  assert.equal(mounts.get("/run/xtables.lock")?.readOnly, undefined);
  assert.equal(mounts.get("/lib/modules")?.readOnly, true);
});

Deno.test("static pod example's ClusterRoleBinding gives deploy/rbac.yaml's ClusterRole to a user, not a wildcard group", () => {
  const binding = only("sidecar-example.yaml", "ClusterRoleBinding");
  assert.equal(binding.roleRef?.name, only("rbac.yaml", "ClusterRole").metadata?.name);
  assert.deepEqual(binding.subjects?.map((s) => s.kind), ["User"]);
});

/**
 * The documents `kubectl kustomize` prints for a kustomization holding `deploy/` and the given
 * components of it, built from a temporary directory as a user's own kustomization would.
 */
async function kustomize(components: string[]): Promise<K8sObject[]> {
  const dir = await Deno.makeTempDir({ prefix: "knp-cfg-kustomize-" });
  try {
    const base = relative(dir, DEPLOY);
    await Deno.writeTextFile(
      `${dir}/kustomization.yaml`,
      [
        "resources:",
        `  - ${base}`,
        ...(components.length > 0 ? ["components:"] : []),
        ...components.map((component) => `  - ${base}/${component}`),
        "",
      ].join("\n"),
    );
    const output = await new Deno.Command("kubectl", {
      args: ["kustomize", dir],
      stdout: "piped",
      stderr: "piped",
    }).output();
    const stderr = new TextDecoder().decode(output.stderr);
    assert.ok(output.success, `kubectl kustomize failed: ${stderr}`);
    return loadAll(new TextDecoder().decode(output.stdout)) as K8sObject[];
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
}

Deno.test("kubectl kustomize builds deploy/ into exactly its RBAC, ConfigMap and DaemonSet, without an init container", async () => {
  const built = await kustomize([]);
  assert.deepEqual(built.map((doc) => doc.kind).sort(), [
    "ClusterRole",
    "ClusterRoleBinding",
    "ConfigMap",
    "DaemonSet",
    "ServiceAccount",
  ]);
  const spec = built.find((doc) => doc.kind === "DaemonSet")?.spec?.template?.spec ?? {};
  assert.equal(spec.initContainers, undefined);
});

Deno.test("the init-only component adds a privileged --init-only init container reading the same ConfigMap, and leaves the proxy NET_ADMIN only", async () => {
  const built = await kustomize(["overlays/init-only"]);
  const spec = built.find((doc) => doc.kind === "DaemonSet")?.spec?.template?.spec ?? {};
  const [init, ...more] = spec.initContainers ?? [];
  assert.ok(init !== undefined && more.length === 0, "one init container");
  assert.equal(init.image, container.image);
  assert.equal(init.securityContext?.privileged, true);
  const initLine = await commandLineOf(spec, init).parsed;
  const proxyLine = await commandLineOf(spec, spec.containers?.[0] ?? {}).parsed;
  assert.equal(initLine.actions.initOnly, true);
  assert.equal(proxyLine.actions.initOnly, false);
  // The same settings: what the init container sets is what the proxy would have asked for.
  assert.deepEqual(initLine.config, proxyLine.config);
  // Nothing else of the pod changes: the proxy keeps NET_ADMIN only, unprivileged.
  assert.deepEqual({ ...spec, initContainers: undefined }, {
    ...podSpec,
    initContainers: undefined,
  });
  assert.deepEqual(spec.containers?.[0]?.securityContext?.capabilities, {
    add: ["NET_ADMIN"],
    drop: ["ALL"],
  });
});

Deno.test("the monitoring component binds the metrics on 0.0.0.0:10249 and adds a Service and a ServiceMonitor scraping them as job kube-proxy", async () => {
  const base = await kustomize([]);
  const built = await kustomize(["overlays/monitoring", "overlays/init-only"]);
  assert.deepEqual(
    built.map((doc) => doc.kind).sort(),
    [...base.map((doc) => doc.kind), "Service", "ServiceMonitor"].sort(),
  );
  const conf = (docs: K8sObject[]) =>
    (docs.find((doc) => doc.kind === "ConfigMap") as unknown as { data: Record<string, string> })
      .data["config.conf"];
  assert.match(conf(built), /^metricsBindAddress: 0\.0\.0\.0:10249$/m);
  assert.equal(
    conf(built).replace("0.0.0.0:10249", "127.0.0.1:10249"),
    conf(base),
    "the rest of the configuration as deploy/configmap.yaml's",
  );
  const data = (docs: K8sObject[]) =>
    (docs.find((doc) => doc.kind === "ConfigMap") as unknown as { data: Record<string, string> })
      .data;
  assert.equal(data(built)["kubeconfig.conf"], data(base)["kubeconfig.conf"]);
  const service = built.find((doc) => doc.kind === "Service") as unknown as {
    metadata: { namespace: string; labels: Record<string, string> };
    spec: {
      clusterIP: string;
      selector: Record<string, string>;
      ports: { name: string; port: number }[];
    };
  };
  assert.equal(service.metadata.namespace, "kube-system");
  assert.equal(service.metadata.labels.jobLabel, "kube-proxy");
  assert.equal(service.spec.clusterIP, "None");
  const daemonSet = built.find((doc) => doc.kind === "DaemonSet")!;
  assert.deepEqual(service.spec.selector, daemonSet.spec?.template?.metadata?.labels);
  assert.deepEqual(service.spec.ports.map((p) => [p.name, p.port]), [["http-metrics", 10249]]);
  const monitor = built.find((doc) => doc.kind === "ServiceMonitor") as unknown as {
    spec: {
      jobLabel: string;
      selector: { matchLabels: Record<string, string> };
      endpoints: { port: string }[];
    };
  };
  assert.equal(monitor.spec.jobLabel, "jobLabel", "job = the Service's jobLabel: kube-proxy");
  assert.deepEqual(monitor.spec.selector.matchLabels, service.metadata.labels);
  assert.equal(monitor.spec.endpoints[0].port, "http-metrics");
});
