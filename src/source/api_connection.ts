/**
 * The connection to the Kubernetes API server: which URL, which credentials, which TLS
 * material — read from a kubeconfig file, the in-cluster service account, or a `--master` URL —
 * and a `get()` that sends an authenticated request with Deno's `fetch`.
 *
 * `@kubernetes/client-node` is used only to read a kubeconfig file and to produce its
 * credentials (bearer tokens, token files that rotate, exec and auth-provider plugins,
 * impersonation, basic auth), and is loaded only then: `--master` alone and the in-cluster
 * service account (a DaemonSet's case) need nothing of it, and loading it takes 0.3–0.6 s of
 * a cold start. Requests go through Deno's own `fetch`, with a
 * `Deno.createHttpClient` carrying the cluster CA, the client certificate and key, and the
 * cluster's proxy.
 *
 * @module
 */

import type { Cluster, KubeConfig, User } from "@kubernetes/client-node";
import type { RequestOptions } from "node:https";
import { VERSION } from "../version.ts";
import { YAMLException } from "js-yaml";
import { dirname, isAbsolute, join } from "node:path";
import { formatBytes } from "../bounded_read.ts";
import { loadYamlDocuments } from "../bounded_yaml.ts";
import { measuredFetch } from "./api_http.ts";

/**
 * The largest kubeconfig read: 4 MiB. Kubeconfigs with embedded certificates for a few dozen
 * clusters stay far below it.
 */
const MAX_KUBECONFIG_BYTES = 4 * 2 ** 20;

/** Where the service-account files live inside a pod. */
const SERVICE_ACCOUNT_TOKEN = "/var/run/secrets/kubernetes.io/serviceaccount/token";
const SERVICE_ACCOUNT_CA = "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt";

/** Options of {@link connectApi}. */
export interface ApiConnectionOptions {
  /** Path of a kubeconfig file; empty or absent means in-cluster or `master`. */
  kubeconfig?: string;
  /** API server URL; overrides the kubeconfig's server, or stands alone without a kubeconfig. */
  master?: string;
  /** Where warnings go. Default `console.error`. */
  log?: (line: string) => void;
  /** Sends requests (tests substitute it). Default the global `fetch`. */
  fetch?: typeof fetch;
  /**
   * Prefix of the in-cluster service-account paths (`/var/run/secrets/...`), for tests.
   * Default `""`.
   */
  inClusterPathPrefix?: string;
}

/** The configuration could not be loaded: missing file, no current context, not in a pod. */
export class ApiConfigError extends Error {
  /** Always `"ApiConfigError"`. */
  override name = "ApiConfigError";
}

/** An open connection to one API server. */
export interface ApiConnection {
  /** The server's base URL, without a trailing slash (e.g. `https://10.0.0.1:6443`). */
  readonly server: string;
  /**
   * Sends `GET server + path` (path with its query, starting with `/`) with the current
   * credentials, `Accept: application/json` and a User-Agent; `signal` aborts it.
   */
  get(path: string, signal: AbortSignal): Promise<Response>;
  /**
   * Sends `method` to `server + path` with the current credentials, as {@link get} does, and
   * `body` as JSON when given (creating Events). Every request, `get`'s too, goes through it.
   */
  send(method: string, path: string, options: SendOptions): Promise<Response>;
  /** Releases the HTTP client (TLS material, pooled connections). */
  close(): void;
}

/** What {@link ApiConnection.send} sends besides the method and path. */
export interface SendOptions {
  /** A JSON body (sent with `Content-Type: application/json`). Default none. */
  readonly body?: string;
  /** Aborts the request. */
  readonly signal: AbortSignal;
}

/**
 * Loads the API configuration the way upstream kube-proxy does: `kubeconfig` when given (its
 * current context; `master` then overrides the server URL), else `master` alone (no
 * credentials), else the in-cluster service account (`KUBERNETES_SERVICE_HOST` and
 * `KUBERNETES_SERVICE_PORT`, the token and CA under `/var/run/secrets/kubernetes.io/`).
 *
 * Throws {@link ApiConfigError} when none of them can be used. A plain `http://` server needs
 * no `insecure-skip-tls-verify`. Deno's `fetch` cannot skip TLS verification or set a TLS
 * server name per client, so `insecure-skip-tls-verify` and `tls-server-name` on an `https://`
 * server are logged as unsupported (run Deno with `--unsafely-ignore-certificate-errors=HOST`
 * to skip verification).
 *
 * @example
 * ```ts
 * const api = await connectApi({ kubeconfig: "/etc/kubernetes/proxy.conf" });
 * const response = await api.get("/api/v1/nodes?limit=1", AbortSignal.timeout(5000));
 * api.close();
 * ```
 */
export async function connectApi(options: ApiConnectionOptions = {}): Promise<ApiConnection> {
  const log = options.log ?? ((line: string) => console.error(line));
  const credentials = options.kubeconfig
    ? await kubeconfigCredentials(options, log)
    : options.master
    ? masterCredentials(options.master)
    : await inClusterCredentials(options.inClusterPathPrefix ?? "");
  const { server, caCerts, cert, key, proxyUrl } = credentials;
  let client: Deno.HttpClient | undefined;
  if (caCerts.length > 0 || (cert !== undefined && key !== undefined) || proxyUrl) {
    client = Deno.createHttpClient({
      ...(caCerts.length > 0 ? { caCerts: [...caCerts] } : {}),
      ...(cert !== undefined && key !== undefined ? { cert, key } : {}),
      ...(proxyUrl ? { proxy: { url: proxyUrl } } : {}),
    });
  }
  const send = measuredFetch(options.fetch ?? fetch);
  const userAgent = `kube-nftproxy/${VERSION}`;
  const connection: ApiConnection = {
    server,
    get: (path: string, signal: AbortSignal) => connection.send("GET", path, { signal }),
    async send(method: string, path: string, options: SendOptions): Promise<Response> {
      const headers = new Headers({ accept: "application/json", "user-agent": userAgent });
      if (options.body !== undefined) headers.set("content-type", "application/json");
      await credentials.authorize(headers);
      const init: RequestInit & { client?: Deno.HttpClient } = {
        method,
        headers,
        signal: options.signal,
      };
      if (options.body !== undefined) init.body = options.body;
      if (client !== undefined) init.client = client;
      return await send(`${server}${path}`, init);
    },
    close(): void {
      client?.close();
      client = undefined;
    },
  };
  return connection;
}

/** Where requests go, with which TLS material, and how each is authorised. */
interface Credentials {
  /** Base URL without a trailing slash. */
  readonly server: string;
  readonly caCerts: readonly string[];
  readonly cert?: string;
  readonly key?: string;
  readonly proxyUrl?: string;
  /** Sets the request's authorization headers; asked per request, as credentials rotate. */
  authorize(headers: Headers): Promise<void>;
}

/** `--master` alone: that URL, no credentials. */
function masterCredentials(master: string): Credentials {
  return { server: checkedServer(master), caCerts: [], authorize: () => Promise.resolve() };
}

/**
 * The pod's service account, as client-go's `InClusterConfig`: `https://` to
 * `KUBERNETES_SERVICE_HOST:KUBERNETES_SERVICE_PORT`, the account's CA, and its token, read
 * again for every request because projected tokens rotate. Read without client-node, whose
 * loading is a third of a cold start.
 */
async function inClusterCredentials(prefix: string): Promise<Credentials> {
  const host = Deno.env.get("KUBERNETES_SERVICE_HOST");
  const port = Deno.env.get("KUBERNETES_SERVICE_PORT");
  if (!host || !port) {
    throw new ApiConfigError(
      "no --kubeconfig and no --master given, and not running in a pod: unable to load " +
        "in-cluster configuration, KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT must " +
        "be defined",
    );
  }
  const tokenFile = `${prefix}${SERVICE_ACCOUNT_TOKEN}`;
  const caFile = `${prefix}${SERVICE_ACCOUNT_CA}`;
  let ca: string;
  try {
    await Deno.stat(tokenFile);
    ca = await Deno.readTextFile(caFile);
  } catch (error) {
    const file = error instanceof Deno.errors.NotFound && !(await exists(tokenFile))
      ? tokenFile
      : caFile;
    throw new ApiConfigError(
      `cannot use the in-cluster service account: ${file}: ${errorMessage(error)}`,
      { cause: error },
    );
  }
  const hostPort = host.includes(":") ? `[${host}]:${port}` : `${host}:${port}`;
  return {
    server: checkedServer(`https://${hostPort}`),
    caCerts: [ca],
    async authorize(headers: Headers): Promise<void> {
      const token = (await Deno.readTextFile(tokenFile)).trim();
      if (token !== "") headers.set("authorization", `Bearer ${token}`);
    },
  };
}

/**
 * A kubeconfig file's current context, through client-node (loaded only here): bearer tokens,
 * token files, exec and auth-provider plugins, basic auth, client certificates; `master`
 * overrides its server URL.
 */
async function kubeconfigCredentials(
  options: ApiConnectionOptions,
  log: (line: string) => void,
): Promise<Credentials> {
  const { KubeConfig } = await import("@kubernetes/client-node");
  const kubeconfig = loadKubeConfig(options, KubeConfig);
  const cluster = kubeconfig.getCurrentCluster()!;
  const server = cluster.server.replace(/\/+$/, "");
  const tls: RequestOptions = {};
  await kubeconfig.applyToHTTPSOptions(tls);
  const https = server.startsWith("https:");
  if (https && cluster.skipTLSVerify) {
    log(
      `insecure-skip-tls-verify is set for ${server}, but Deno's fetch cannot skip TLS ` +
        `verification per connection: run with --unsafely-ignore-certificate-errors=` +
        `${new URL(server).hostname} or give the cluster's CA`,
    );
  }
  if (https && cluster.tlsServerName) {
    log(`tls-server-name ${cluster.tlsServerName} is not supported; verifying ${server} as is`);
  }
  const tokenFile = kubeconfigTokenFile(options.kubeconfig!);
  return {
    server,
    caCerts: pemList(tls.ca),
    cert: pem(tls.cert),
    key: pem(tls.key),
    proxyUrl: cluster.proxyUrl,
    async authorize(headers: Headers): Promise<void> {
      // Asked per request: token files rotate and exec plugins' tokens expire.
      const auth: RequestOptions = {};
      await kubeconfig.applyToHTTPSOptions(auth);
      for (const [name, value] of Object.entries(auth.headers ?? {})) {
        if (value !== undefined) {
          headers.set(name, Array.isArray(value) ? value.join(", ") : `${value}`);
        }
      }
      if (typeof auth.auth === "string" && !headers.has("authorization")) {
        headers.set("authorization", `Basic ${btoa(auth.auth)}`);
      }
      if (tokenFile !== undefined && !headers.has("authorization")) {
        // kubeconfig's `tokenFile` (kubeadm's kube-proxy kubeconfig uses it), which
        // client-node 2.0.1 ignores; read per request because projected tokens rotate.
        const token = (await Deno.readTextFile(tokenFile)).trim();
        if (token !== "") headers.set("authorization", `Bearer ${token}`);
      }
    },
  };
}

/** A KubeConfig holding exactly one cluster and user: the ones requests go to and act as. */
function loadKubeConfig(
  options: ApiConnectionOptions,
  KubeConfigClass: typeof KubeConfig,
): KubeConfig {
  const loaded = new KubeConfigClass();
  const master = options.master ?? "";
  const path = options.kubeconfig!;
  try {
    // Read once, with the size, nesting and alias limits of every outside file; client-node
    // then parses the same text, as its loadFromFile would.
    const text = readKubeconfig(path);
    loaded.loadFromString(text);
    loaded.makePathsAbsolute(dirname(path));
  } catch (error) {
    throw new ApiConfigError(`cannot load kubeconfig ${path}: ${errorMessage(error)}`, {
      cause: error,
    });
  }
  const cluster = loaded.getCurrentCluster();
  if (cluster === null) {
    throw new ApiConfigError(
      `kubeconfig ${options.kubeconfig}: current context "${loaded.getCurrentContext()}" ` +
        "names no cluster",
    );
  }
  const server = checkedServer(master !== "" ? master : cluster.server);
  const user: User = loaded.getCurrentUser() ?? { name: "anonymous" };
  const effective: Cluster = {
    ...cluster,
    server,
    // TLS verification means nothing for http://, and client-node refuses http:// without it.
    skipTLSVerify: cluster.skipTLSVerify || server.startsWith("http:"),
  };
  const kubeconfig = new KubeConfigClass();
  kubeconfig.loadFromClusterAndUser(effective, user);
  return kubeconfig;
}

/** `server` without trailing slashes; {@link ApiConfigError} unless it is an http(s) URL. */
function checkedServer(server: string): string {
  try {
    const url = new URL(server);
    if (url.protocol !== "http:" && url.protocol !== "https:") throw new Error("not http(s)");
  } catch {
    throw new ApiConfigError(`API server URL "${server}" is not an http:// or https:// URL`);
  }
  return server.replace(/\/+$/, "");
}

async function exists(path: string): Promise<boolean> {
  try {
    await Deno.stat(path);
    return true;
  } catch {
    return false;
  }
}

/**
 * The current user's `tokenFile` in a kubeconfig file (relative paths resolved against the
 * file's directory, as kubectl does), or undefined.
 */
function kubeconfigTokenFile(path: string): string | undefined {
  type Doc = {
    "current-context"?: string;
    contexts?: { name?: string; context?: { user?: string } }[];
    users?: { name?: string; user?: { tokenFile?: string } }[];
  };
  let doc: Doc;
  try {
    doc = (loadYamlDocuments(readKubeconfig(path))[0] ?? {}) as Doc;
  } catch {
    return undefined; // loadKubeConfig() already reported an unreadable file
  }
  const context = doc.contexts?.find((c) => c.name === doc["current-context"])?.context;
  const file = doc.users?.find((u) => u.name === context?.user)?.user?.tokenFile;
  if (typeof file !== "string" || file === "") return undefined;
  return isAbsolute(file) ? file : join(dirname(path), file);
}

/**
 * A kubeconfig file's text, at most {@link MAX_KUBECONFIG_BYTES}, checked to be YAML within
 * the nesting and alias limits (`../bounded_yaml.ts`). Synchronous, as client-node reads it.
 */
function readKubeconfig(path: string): string {
  const file = Deno.openSync(path, { read: true });
  let bytes: Uint8Array;
  try {
    bytes = new Uint8Array(MAX_KUBECONFIG_BYTES + 1);
    let length = 0;
    for (;;) {
      const n = file.readSync(bytes.subarray(length));
      if (n === null) break;
      length += n;
      if (length > MAX_KUBECONFIG_BYTES) {
        throw new Error(`larger than ${formatBytes(MAX_KUBECONFIG_BYTES)}`);
      }
    }
    bytes = bytes.subarray(0, length);
  } finally {
    file.close();
  }
  const text = new TextDecoder().decode(bytes);
  try {
    loadYamlDocuments(text, { filename: path });
  } catch (error) {
    if (error instanceof YAMLException) throw new Error(error.message.split("\n")[0]);
    throw error;
  }
  return text;
}

/** PEM text of one certificate or key given as a Buffer or string. */
function pem(value: unknown): string | undefined {
  if (typeof value === "string") return value;
  if (value instanceof Uint8Array) return new TextDecoder().decode(value);
  return undefined;
}

/** PEM texts of a CA given as one value or a list. */
function pemList(value: unknown): string[] {
  const values = Array.isArray(value) ? value : [value];
  return values.map(pem).filter((v): v is string => v !== undefined);
}

function errorMessage(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}
