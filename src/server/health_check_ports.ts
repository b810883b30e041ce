/**
 * Health-check node ports: one HTTP server per `healthCheckNodePort` of an
 * `externalTrafficPolicy: Local` LoadBalancer Service, telling the cloud load balancer whether
 * this node has a local ready endpoint for it — upstream kube-proxy's `ServiceHealthServer`
 * (`pkg/proxy/healthcheck/service_health.go`).
 *
 * Upstream's rules, kept here:
 * - Any path answers `200` when the Service has local ready endpoints and the proxy itself is
 *   healthy (its sync rules only, as `/livez`: a draining Node does not fail these), `503`
 *   otherwise, with upstream's JSON body (layout included): the Service's namespace and name,
 *   `localEndpoints` and `serviceProxyHealthy`; the `X-Load-Balancing-Endpoint-Weight` header
 *   carries `localEndpoints` too (load balancers that weigh nodes, such as Google Cloud's
 *   `WEIGHTED_MAGLEV`, read it).
 * - `localEndpoints` counts distinct IPs of ready endpoints on this node over all of the
 *   Service's ports (terminating ones do not count: the node should stop getting new traffic).
 * - Servers listen on the node-port addresses (in nft mode by default the node's primary IPs)
 *   or on every address (`0.0.0.0`) when those match everything or cannot be found.
 * - After each sync, {@link ServiceHealthServer.sync} opens the ports of new Services, closes
 *   those of Services that are gone (or whose port changed) and retries ports that could not be
 *   bound; counts change without reopening anything. A port that cannot be bound is reported
 *   (upstream records the `FailedToStartServiceHealthcheck` Event on the Service).
 *
 * @example
 * ```ts
 * const server = new ServiceHealthServer({ proxyHealthy: () => health.status().healthy });
 * await server.sync(healthCheckedServices(state.services, state.endpoints), {
 *   bindIPs: healthCheckBindIPs({ nodePortAddresses: [], nodeIPs: ["192.168.77.1"] }),
 * });
 * await server.close();
 * ```
 *
 * @module
 */
import type { Endpoint } from "../model/endpoint.ts";
import { cidrContains } from "../model/ip.ts";
import { serviceKey, type ServicePort } from "../model/service_port.ts";
import { type HttpServer, serveHttp, type ServeOptions } from "./serve.ts";

/** One Service with a health-check node port, as the last sync left it. */
export interface HealthCheckedService {
  readonly namespace: string;
  readonly name: string;
  /** `spec.healthCheckNodePort`. */
  readonly port: number;
  /** Distinct IPs of ready endpoints on this node, over all of the Service's ports. */
  readonly localEndpoints: number;
}

/**
 * The Services that need a health-check node port, by `namespace/name`, with their local ready
 * endpoint counts. Pure.
 *
 * @example
 * ```ts
 * healthCheckedServices(state.services, state.endpoints).get("default/web");
 * // { namespace: "default", name: "web", port: 30300, localEndpoints: 1 }
 * ```
 */
export function healthCheckedServices(
  services: ReadonlyMap<string, ServicePort>,
  endpoints: ReadonlyMap<string, readonly Endpoint[]>,
): Map<string, HealthCheckedService> {
  const found = new Map<string, { namespace: string; name: string; port: number }>();
  const localIPs = new Map<string, Set<string>>();
  for (const [key, sp] of services) {
    if (sp.healthCheckNodePort === 0) continue;
    const service = serviceKey(sp.name);
    found.set(service, {
      namespace: sp.name.namespace,
      name: sp.name.name,
      port: sp.healthCheckNodePort,
    });
    const ips = localIPs.get(service) ?? new Set<string>();
    for (const ep of endpoints.get(key) ?? []) {
      if (ep.isLocal && ep.ready) ips.add(ep.ip);
    }
    localIPs.set(service, ips);
  }
  return new Map(
    [...found].map((
      [key, s],
    ) => [key, { ...s, localEndpoints: localIPs.get(key)?.size ?? 0 }]),
  );
}

/** What {@link healthCheckBindIPs} decides from. */
export interface BindFacts {
  /** `nodePortAddresses`: CIDRs, or empty / `["primary"]` for the node's primary IPs. */
  readonly nodePortAddresses: readonly string[];
  /** The Node's primary IPs (empty until the Node is known). */
  readonly nodeIPs: readonly string[];
  /** `bindAddress`, used as the primary IP when the Node has none; empty when unset. */
  readonly bindAddress?: string;
  /**
   * Addresses of this host's interfaces (`NodeFacts.localAddresses`, as the sync read them), or
   * undefined when they cannot be read.
   */
  readonly localAddresses?: readonly string[];
}

/** The wildcard address health-check servers listen on when every node address matches. */
export const ALL_ADDRESSES = "0.0.0.0";

/**
 * The IPs health-check servers listen on, as upstream picks them: the local addresses inside
 * the node-port CIDRs (for `primary`: the node's primary IPs), or {@link ALL_ADDRESSES} when the
 * CIDRs match everything, when no primary IP is known yet, or when the interfaces cannot be
 * read. Sorted; empty when no local address matches (nothing is served then, as upstream).
 *
 * @example
 * ```ts
 * healthCheckBindIPs({ nodePortAddresses: [], nodeIPs: ["192.168.77.1"],
 *   localAddresses: ["127.0.0.1", "192.168.77.1"] }); // ["192.168.77.1"]
 * ```
 */
export function healthCheckBindIPs(facts: BindFacts): string[] {
  const primary = facts.nodePortAddresses.length === 0 ||
    (facts.nodePortAddresses.length === 1 && facts.nodePortAddresses[0] === "primary");
  let cidrs: string[];
  if (primary) {
    const bind = facts.bindAddress ?? "";
    const ips = facts.nodeIPs.length > 0 ? facts.nodeIPs : bind === "" ? [] : [bind];
    cidrs = ips
      .filter((ip) => !/^127\.|^::1$/.test(ip))
      .map((ip) => ip.includes(":") ? `${ip}/128` : `${ip}/32`);
  } else cidrs = [...facts.nodePortAddresses];
  if (cidrs.length === 0 || cidrs.some((c) => c.endsWith("/0"))) return [ALL_ADDRESSES];
  if (facts.localAddresses === undefined) return [ALL_ADDRESSES];
  const matching = facts.localAddresses.filter((ip) => cidrs.some((c) => cidrContains(c, ip)));
  return [...new Set(matching)].sort();
}

/** What one health-check request reports. */
export interface ServiceHealthReport {
  readonly namespace: string;
  readonly name: string;
  readonly localEndpoints: number;
  /** The proxy's own health (its sync rules, as `/livez`). */
  readonly proxyHealthy: boolean;
}

/**
 * The handler of one Service's health-check port: any path and method answers upstream's JSON
 * body and `X-Load-Balancing-Endpoint-Weight` header (the local endpoint count), 200 when the
 * Service has local endpoints and the proxy is healthy, else 503. `read` is
 * called per request, so counts change without a new handler. Pure apart from `read`.
 *
 * @example
 * ```ts
 * const handle = serviceHealthHandler(() => ({
 *   namespace: "default", name: "web", localEndpoints: 1, proxyHealthy: true,
 * }));
 * const res = handle(new Request("http://192.168.77.1:30300/")); // 200
 * ```
 */
export function serviceHealthHandler(
  read: () => ServiceHealthReport,
): (req: Request) => Response {
  return (_req: Request): Response => {
    const r = read();
    const healthy = r.localEndpoints > 0 && r.proxyHealthy;
    // Upstream's exact layout (Go's dedent of a tab-indented literal), tabs included.
    const body = [
      "{",
      '\t"service": {',
      `\t\t"namespace": ${JSON.stringify(r.namespace)},`,
      `\t\t"name": ${JSON.stringify(r.name)}`,
      "\t},",
      `\t"localEndpoints": ${r.localEndpoints},`,
      `\t"serviceProxyHealthy": ${r.proxyHealthy}`,
      "}",
    ].join("\n");
    return new Response(body, {
      status: healthy ? 200 : 503,
      headers: {
        "content-type": "application/json",
        "x-content-type-options": "nosniff",
        "x-load-balancing-endpoint-weight": `${r.localEndpoints}`,
      },
    });
  };
}

/** Options of a {@link ServiceHealthServer}. */
export interface ServiceHealthServerOptions {
  /** The proxy's own health, read per request (upstream: sync rules only, not the Node). */
  proxyHealthy: () => boolean;
  /** One line per opened, closed or failed port. Default: nothing. */
  log?: (line: string) => void;
  /**
   * Called when a Service's port cannot be bound, once per distinct failure (as it is logged),
   * with upstream's message `node NAME failed to start healthcheck "NS/NAME" on port N: ERR`
   * when `hostname` is set. For the `FailedToStartServiceHealthcheck` Event. Default: nothing.
   */
  onOpenFailed?: (service: HealthCheckedService, message: string) => void;
  /** This node's name, for {@link onOpenFailed}'s message. Default empty. */
  hostname?: string;
  /** Binds a handler to `ip:port`; default {@link serveHttp}. Tests substitute it. */
  serve?: (address: string, handler: (req: Request) => Response) => HttpServer | null;
  /**
   * What the default `serve` passes to {@link serveHttp} (the shared connection pool, where
   * accept errors are logged and counted); its `name` defaults to `health-check`.
   */
  serveOptions?: ServeOptions;
}

/** What {@link ServiceHealthServer.sync} makes current besides the Services. */
export interface ServiceHealthSync {
  /** Where to listen, from {@link healthCheckBindIPs}. */
  readonly bindIPs: readonly string[];
}

interface Instance {
  service: HealthCheckedService;
  servers: HttpServer[];
}

/**
 * The set of open health-check ports. Call {@link sync} after every sync with the Services from
 * {@link healthCheckedServices}; call {@link close} on shutdown.
 */
export class ServiceHealthServer {
  readonly #options: ServiceHealthServerOptions;
  readonly #instances = new Map<string, Instance>();
  /** Last failure message per Service, so a port that keeps failing is logged once. */
  readonly #failures = new Map<string, string>();
  #bindIPs: readonly string[] = [];

  /** Creates a server with no ports open. */
  constructor(options: ServiceHealthServerOptions) {
    this.#options = options;
  }

  /** The open health-check ports by `namespace/name`. */
  get ports(): ReadonlyMap<string, number> {
    return new Map([...this.#instances].map(([key, i]) => [key, i.service.port]));
  }

  /**
   * Makes `services` the served set: closes the ports of Services that are gone or whose port
   * changed (all of them when the bind IPs changed), opens the missing ones, and updates the
   * counts. A port that cannot be bound is logged and tried again on the next call.
   */
  async sync(
    services: ReadonlyMap<string, HealthCheckedService>,
    options: ServiceHealthSync,
  ): Promise<void> {
    const ipsChanged = options.bindIPs.join() !== this.#bindIPs.join();
    this.#bindIPs = [...options.bindIPs];
    const closing: Promise<void>[] = [];
    for (const [key, instance] of this.#instances) {
      const wanted = services.get(key);
      if (wanted !== undefined && wanted.port === instance.service.port && !ipsChanged) continue;
      this.#log(`closing health check port ${instance.service.port} of Service ${key}`);
      this.#instances.delete(key);
      closing.push(closeAll(instance.servers));
    }
    await Promise.all(closing);
    for (const key of this.#failures.keys()) {
      if (!services.has(key)) this.#failures.delete(key);
    }
    for (const [key, service] of services) {
      const instance = this.#instances.get(key);
      if (instance !== undefined) {
        instance.service = service;
        continue;
      }
      await this.#open(key, service);
    }
  }

  /** Closes every port. */
  async close(): Promise<void> {
    const instances = [...this.#instances.values()];
    this.#instances.clear();
    await Promise.all(instances.map((i) => closeAll(i.servers)));
  }

  async #open(key: string, service: HealthCheckedService): Promise<void> {
    const serveOptions = { name: "health-check", ...this.#options.serveOptions };
    const serve = this.#options.serve ??
      ((address: string, handler: (req: Request) => Response) =>
        serveHttp(address, handler, serveOptions));
    const instance: Instance = { service, servers: [] };
    const handler = serviceHealthHandler(() => ({
      namespace: instance.service.namespace,
      name: instance.service.name,
      localEndpoints: instance.service.localEndpoints,
      proxyHealthy: this.#options.proxyHealthy(),
    }));
    try {
      for (const ip of this.#bindIPs) {
        const address = ip.includes(":") ? `[${ip}]:${service.port}` : `${ip}:${service.port}`;
        const server = serve(address, handler);
        if (server !== null) instance.servers.push(server);
      }
    } catch (err) {
      // Like upstream: give up this Service's ports for now, retry on the next sync.
      await closeAll(instance.servers);
      const message = `cannot open health check port ${service.port} of Service ${key}: ` +
        (err as Error).message;
      if (this.#failures.get(key) !== message) {
        this.#log(message);
        this.#options.onOpenFailed?.(
          service,
          `node ${this.#options.hostname ?? ""} failed to start healthcheck "${key}" on port ` +
            `${service.port}: ${(err as Error).message}`,
        );
      }
      this.#failures.set(key, message);
      return;
    }
    this.#failures.delete(key);
    this.#instances.set(key, instance);
    this.#log(
      `opened health check port ${service.port} of Service ${key} on ${
        this.#bindIPs.join(", ") || "no address"
      }`,
    );
  }

  #log(line: string): void {
    this.#options.log?.(line);
  }
}

async function closeAll(servers: readonly HttpServer[]): Promise<void> {
  await Promise.allSettled(servers.map((s) => s.close()));
}
