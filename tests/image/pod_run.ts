/**
 * A container of deploy/'s manifests turned into the `podman run` that runs it the way the
 * kubelet would on this machine: its args with `$(VAR)` expanded, its env, its securityContext
 * (capabilities, read-only root, no privilege escalation) and its volume mounts, each volume
 * backed by what the caller provides — and the container put into a network namespace the test
 * made instead of the node's.
 *
 * @example
 * ```ts
 * const pod = podSpec(await Deno.readTextFile("deploy/daemonset.yaml"));
 * const argv = podmanRunArgs(pod.containers[0], {
 *   image: "localhost/kube-nftproxy:0.1.0",
 *   name: "knp-img-1a2b3c",
 *   netns: "knp-img-1a2b3c",
 *   nodeName: "node-a",
 *   volumes: { config: "/tmp/config", "xtables-lock": "/tmp/xtables.lock" },
 *   podVolumes: pod.volumes,
 * });
 * ```
 *
 * @module
 */
import { loadAll } from "js-yaml";

/** The parts of a container spec this module reads. */
export interface ContainerSpec {
  name: string;
  image: string;
  args?: string[];
  env?: { name: string; value?: string; valueFrom?: { fieldRef?: { fieldPath: string } } }[];
  securityContext?: {
    runAsUser?: number;
    privileged?: boolean;
    allowPrivilegeEscalation?: boolean;
    readOnlyRootFilesystem?: boolean;
    capabilities?: { add?: string[]; drop?: string[] };
  };
  volumeMounts?: { name: string; mountPath: string; readOnly?: boolean }[];
}

/** A volume of the pod: only what decides how it is backed here. */
export interface VolumeSpec {
  name: string;
  emptyDir?: Record<string, unknown>;
  hostPath?: { path: string; type?: string };
  configMap?: { name: string };
}

/** The pod spec of a manifest: a DaemonSet's template or a Pod's own. */
export interface PodSpec {
  containers: ContainerSpec[];
  volumes: VolumeSpec[];
}

/**
 * The pod spec of the first DaemonSet or Pod in `yaml` (a manifest file, several documents
 * allowed). Throws when there is none.
 */
export function podSpec(yaml: string): PodSpec {
  for (const doc of loadAll(yaml)) {
    const object = doc as {
      kind?: string;
      spec?: { template?: { spec?: PodSpec } } & Partial<PodSpec>;
    };
    const spec = object?.kind === "DaemonSet"
      ? object.spec?.template?.spec
      : object?.kind === "Pod"
      ? object.spec as PodSpec
      : undefined;
    if (spec !== undefined) return { containers: spec.containers, volumes: spec.volumes ?? [] };
  }
  throw new Error("no DaemonSet or Pod in the manifest");
}

/** Where each volume comes from on this machine. */
export interface RunOptions {
  image: string;
  /** The container's name (podman's). */
  name: string;
  /** The network namespace (under /run/netns) the container joins. */
  netns: string;
  /** What `spec.nodeName` is (for env `fieldRef`s). */
  nodeName: string;
  /**
   * A host path for each volume that is neither an emptyDir (a tmpfs here) nor a read-only
   * hostPath (mounted as it is): configMaps and writable hostPaths, which the test provides.
   */
  volumes: Record<string, string>;
  /** The pod's volumes, to tell emptyDirs and hostPaths from the rest. */
  podVolumes: readonly VolumeSpec[];
  /** Replaces the container's args (default: its own). */
  args?: readonly string[];
}

/**
 * `podman run` arguments (after `podman`, without `--rm`, detached) that run `container` as its
 * manifest says. Throws on a securityContext this image must never get (privileged, a
 * capability other than NET_ADMIN, escalation allowed) and on a volume with no backing.
 */
export function podmanRunArgs(container: ContainerSpec, options: RunOptions): string[] {
  const security = container.securityContext ?? {};
  const add = security.capabilities?.add ?? [];
  const drop = security.capabilities?.drop ?? [];
  if (security.privileged || security.allowPrivilegeEscalation !== false) {
    throw new Error(`${container.name}: privileged or allowing privilege escalation`);
  }
  if (add.some((cap) => cap !== "NET_ADMIN") || !drop.includes("ALL")) {
    throw new Error(`${container.name}: capabilities ${JSON.stringify({ add, drop })}`);
  }
  const env = new Map<string, string>();
  for (const variable of container.env ?? []) {
    const field = variable.valueFrom?.fieldRef?.fieldPath;
    if (field === "spec.nodeName") env.set(variable.name, options.nodeName);
    else if (variable.value !== undefined) env.set(variable.name, variable.value);
    else throw new Error(`${container.name}: env ${variable.name} has no value here`);
  }
  const argv = [
    "run",
    "--detach",
    "--name",
    options.name,
    // The limits runc needs on these machines (podman sets none that fit otherwise).
    "--ulimit",
    "nofile=1024:1024",
    "--ulimit",
    "nproc=1024:1024",
    "--network",
    `ns:/run/netns/${options.netns}`,
    "--user",
    String(security.runAsUser ?? 0),
    ...drop.flatMap((cap) => ["--cap-drop", cap]),
    ...add.flatMap((cap) => ["--cap-add", cap]),
    // The pod's seccompProfile RuntimeDefault is podman's default profile: nothing to add.
    "--security-opt",
    "no-new-privileges",
  ];
  if (security.readOnlyRootFilesystem) argv.push("--read-only");
  for (const [name, value] of env) argv.push("--env", `${name}=${value}`);
  for (const mount of container.volumeMounts ?? []) {
    const volume = options.podVolumes.find((v) => v.name === mount.name);
    if (volume === undefined) throw new Error(`${container.name}: no volume ${mount.name}`);
    const ro = mount.readOnly ? ":ro" : "";
    if (volume.emptyDir !== undefined) {
      argv.push("--tmpfs", `${mount.mountPath}:rw,size=64m`);
    } else if (options.volumes[mount.name] !== undefined) {
      argv.push("--volume", `${options.volumes[mount.name]}:${mount.mountPath}${ro}`);
    } else if (volume.hostPath !== undefined && mount.readOnly) {
      argv.push("--volume", `${volume.hostPath.path}:${mount.mountPath}:ro`);
    } else {
      throw new Error(`${container.name}: volume ${mount.name} needs a path from the test`);
    }
  }
  const args = options.args ??
    (container.args ?? []).map((arg) =>
      arg.replace(/\$\(([A-Z_][A-Z0-9_]*)\)/g, (whole, name) => env.get(name) ?? whole)
    );
  argv.push(options.image, ...args);
  return argv;
}
