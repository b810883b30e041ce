/**
 * The proxy's configuration: one typed record with upstream kube-proxy's defaults.
 *
 * Everything that reads flags or a `KubeProxyConfiguration` file produces a {@link Config};
 * nothing downstream reads flags or files itself.
 *
 * @module
 */

/** Which backend renders and applies the rules. */
export type ProxyMode = "nft" | "iptables";

/** Which iptables implementation programs the kernel in iptables mode; `auto` detects it. */
export type IptablesBackendChoice = "auto" | "nft" | "legacy";

/** How traffic from inside the cluster is told apart from traffic from outside. */
export type DetectLocalMode =
  | "ClusterCIDR"
  | "NodeCIDR"
  | "BridgeInterface"
  | "InterfaceNamePrefix"
  | "None";

/**
 * How nft mode picks an endpoint for a new connection (an extension of ours; ipvs mode's
 * `ipvs.scheduler` maps onto it): `random` (`numgen random`, upstream nftables mode's choice),
 * `round-robin` (`numgen inc`) or `source-hash` (a hash of the client address, so a client keeps
 * its endpoint while the endpoint set is unchanged).
 */
export type EndpointScheduler = "random" | "round-robin" | "source-hash";

/** How log lines are written: klog's text format or its JSON format (`--logging-format`). */
export type LoggingFormat = "text" | "json";

/** The whole configuration of one proxy process. */
export interface Config {
  /** Backend: `nft` (native) or `iptables` (classic KUBE-* layout). Default `nft`. */
  mode: ProxyMode;
  /** Name of this node; the Node object with this name supplies node IPs, zone and pod CIDRs. */
  hostname: string;
  /** Pod network CIDRs, at most one per IP family (upstream `clusterCIDR`, comma-separated). */
  clusterCIDRs: string[];
  /** Local-traffic detection mode (upstream `detectLocalMode`). Default `ClusterCIDR`. */
  detectLocalMode: DetectLocalMode;
  /** Bridge name for `BridgeInterface` mode (upstream `detectLocal.bridgeInterface`). */
  bridgeInterface: string;
  /** Interface prefix for `InterfaceNamePrefix` mode (upstream `detectLocal.interfaceNamePrefix`). */
  interfaceNamePrefix: string;
  /**
   * CIDRs (or the word `primary`) whose local addresses accept NodePorts; `0.0.0.0/0` / `::/0`
   * (or no CIDR of a family) mean every local address. Default: primary in nft mode, every
   * local address in iptables mode, as kube-proxy's modes.
   */
  nodePortAddresses: string[];
  /** Masquerade every packet sent to a service IP. Default false. */
  masqueradeAll: boolean;
  /** Bit of the packet mark that requests masquerading. Default 14 (0x4000). */
  masqueradeBit: number;
  /** Least time between two syncs, in milliseconds. Default 1000. */
  minSyncPeriodMs: number;
  /** Longest time between two syncs (and the retry period after a failure), ms. Default 30000. */
  syncPeriodMs: number;
  /** Node IPs given explicitly (upstream `bindAddress` when not 0.0.0.0); else from the Node. */
  bindAddress: string;
  /** Address of the health server (`/healthz`, `/livez`). Default `0.0.0.0:10256`. */
  healthzBindAddress: string;
  /** Address of the metrics server (`/metrics`). Default `127.0.0.1:10249`. */
  metricsBindAddress: string;
  /**
   * A health or metrics address that cannot be bound ends the process (upstream
   * `bindAddressHardFail`); otherwise binding is retried. Default false.
   */
  bindAddressHardFail: boolean;
  /**
   * The proxy process's `oom_score_adj` (-1000 to 1000), written to `/proc/self/oom_score_adj`
   * at start-up as upstream does, so that the kernel's OOM killer spares the proxy. Default -999.
   */
  oomScoreAdj: number;
  /** Name of the nft table (both `ip` and `ip6` families). Default `kube-nftproxy`. */
  tableName: string;
  /**
   * iptables mode: `nft` (iptables-nft), `legacy` (iptables-legacy) or `auto`, the one the node
   * already uses (kubelet's hint chains, then existing rules), like upstream's image. Default
   * `auto`.
   */
  iptablesBackend: IptablesBackendChoice;
  /** Path of a kubeconfig file; empty means in-cluster or `master`. */
  kubeconfig: string;
  /** API server URL overriding the kubeconfig's. */
  master: string;
  /**
   * API requests per second the client may send on average (client-go's token bucket); 0 or
   * below sends without limit. Default 5.
   */
  kubeApiQps: number;
  /** API requests the client may send at once before {@link kubeApiQps} applies. Default 10. */
  kubeApiBurst: number;
  /** Take objects from this YAML file instead of the API server. */
  fromFile: string;
  /**
   * The largest `--from-file` cluster file read, in bytes (an extension of ours); a larger file
   * is refused. Default 128 MiB.
   */
  maxClusterFileBytes: number;
  /**
   * The largest LIST answer read from the API server, in bytes (an extension of ours); a larger
   * one is an error and retried. Default 256 MiB.
   */
  maxListBytes: number;
  /**
   * The largest single watch event read from the API server, in bytes (an extension of ours);
   * a larger one ends the watch, which is restarted. Default 16 MiB.
   */
  maxWatchEventBytes: number;
  /** Log verbosity (upstream `-v`). Default 0. */
  verbosity: number;
  /** Log line format (upstream `--logging-format`). Default `text`. */
  loggingFormat: LoggingFormat;
  /** Endpoint choice for new connections in nft mode. Default `random`. */
  scheduler: EndpointScheduler;
  /**
   * Conntrack entries per CPU: `nf_conntrack_max` is set to this × CPUs, at least
   * {@link conntrackMin}; 0 leaves it alone. Default 32768.
   */
  conntrackMaxPerCore: number;
  /** Smallest `nf_conntrack_max` the proxy sets. Default 131072. */
  conntrackMin: number;
  /** `nf_conntrack_tcp_timeout_established`, ms; 0 leaves it alone. Default 24h. */
  conntrackTCPEstablishedTimeoutMs: number;
  /** `nf_conntrack_tcp_timeout_close_wait`, ms; 0 leaves it alone. Default 1h. */
  conntrackTCPCloseWaitTimeoutMs: number;
  /** Set `nf_conntrack_tcp_be_liberal` (false leaves it alone). Default false. */
  conntrackTCPBeLiberal: boolean;
  /** `nf_conntrack_udp_timeout`, ms; 0 leaves it alone. Default 0. */
  conntrackUDPTimeoutMs: number;
  /** `nf_conntrack_udp_timeout_stream`, ms; 0 leaves it alone. Default 0. */
  conntrackUDPStreamTimeoutMs: number;
}

/** Upstream kube-proxy's defaults, adapted to this proxy. */
export const DEFAULT_CONFIG: Readonly<Config> = Object.freeze(
  {
    mode: "nft",
    hostname: "",
    clusterCIDRs: [],
    detectLocalMode: "ClusterCIDR",
    bridgeInterface: "",
    interfaceNamePrefix: "",
    nodePortAddresses: [],
    masqueradeAll: false,
    masqueradeBit: 14,
    minSyncPeriodMs: 1000,
    syncPeriodMs: 30000,
    bindAddress: "",
    healthzBindAddress: "0.0.0.0:10256",
    metricsBindAddress: "127.0.0.1:10249",
    bindAddressHardFail: false,
    oomScoreAdj: -999,
    tableName: "kube-nftproxy",
    iptablesBackend: "auto",
    kubeconfig: "",
    master: "",
    kubeApiQps: 5,
    kubeApiBurst: 10,
    fromFile: "",
    maxClusterFileBytes: 128 * 2 ** 20,
    maxListBytes: 256 * 2 ** 20,
    maxWatchEventBytes: 16 * 2 ** 20,
    verbosity: 0,
    loggingFormat: "text",
    scheduler: "random",
    conntrackMaxPerCore: 32768,
    conntrackMin: 131072,
    conntrackTCPEstablishedTimeoutMs: 24 * 3600_000,
    conntrackTCPCloseWaitTimeoutMs: 3600_000,
    conntrackTCPBeLiberal: false,
    conntrackUDPTimeoutMs: 0,
    conntrackUDPStreamTimeoutMs: 0,
  } satisfies Config,
);
