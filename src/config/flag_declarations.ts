/**
 * The command line's flags as declared: each flag's name, argument, choices, description and
 * default as `--help` shows them (upstream kube-proxy's names and meanings, plus ours). Parsing
 * and checking the values is flags.ts's business; this module only says what exists.
 *
 * @module
 */
import { Command, Option } from "@commander-js/extra-typings";
import { DEFAULT_CONFIG } from "./config.ts";
import { formatGoDuration } from "./duration.ts";
import { DEFAULT_PORTS } from "./validation.ts";

/** ` (default: …)` for a description, from the value in {@link DEFAULT_CONFIG}. */
function byDefault(value: string | number | boolean): string {
  return ` (default: ${value === "" ? '""' : value})`;
}

/** Collects repeated list flags, as pflag's string slices do: `--x a,b --x c` → "a,b", "c". */
function collect(value: string, previous: string[] | undefined): string[] {
  return [...(previous ?? []), value];
}

/**
 * The command-line program with every flag declared; `parse` fills its `opts()`, and
 * `helpInformation()` is the `--help` text.
 */
export function declareFlags() {
  const d = DEFAULT_CONFIG;
  const booleanFlag = <F extends string>(flags: F, description: string) =>
    new Option<`${F} [bool]`>(`${flags} [bool]`, `${description}${byDefault(false)}`);
  const durationOption = <F extends string>(flags: F, description: string, defaultMs: number) =>
    new Option<F>(flags, `${description}${byDefault(formatGoDuration(defaultMs))}`);
  return new Command("kube-nftproxy")
    .usage("[--mode=nft|iptables] [--config FILE] [flags]")
    .description(
      "A Kubernetes service proxy (kube-proxy replacement) programming nftables or iptables.\n" +
        "Flags override the --config file, which overrides the defaults.",
    )
    .helpOption(false)
    .exitOverride()
    .configureOutput({ writeOut: () => {}, writeErr: () => {} })
    .configureHelp({ helpWidth: 100 })
    .allowExcessArguments(false)
    .addOption(
      new Option(
        "--mode <mode>",
        `backend: nft (native nftables) or iptables (classic KUBE-* chains)${byDefault(d.mode)}`,
      ),
    )
    .addOption(
      new Option(
        "--config <path>",
        "read a KubeProxyConfiguration (kubeproxy.config.k8s.io/v1alpha1), or a ConfigMap " +
          'holding one under data["config.conf"] as kubeadm writes it',
      ),
    )
    .addOption(
      new Option(
        "--from-file <path>",
        "take Nodes, ServiceCIDRs, Services and EndpointSlices from this YAML file instead " +
          "of the API server",
      ),
    )
    .addOption(booleanFlag("--once", "do one full sync, then exit"))
    .addOption(
      booleanFlag(
        "--dry-run",
        "apply nothing: read the kernel's tables (or iptables rules) and print the " +
          "transaction that would bring them to the wanted state, then exit",
      ),
    )
    .addOption(
      new Option(
        "--output <format>",
        "how --dry-run prints: text (an nft script, or iptables-restore input) or json",
      )
        .choices(["text", "json"] as const),
    )
    .addOption(booleanFlag(
      "--cleanup",
      "remove everything this proxy created, and kube-proxy's nftables tables, then exit",
    ))
    .addOption(
      new Option(
        "--table-name <name>",
        `name of the nft tables (ip and ip6)${byDefault(d.tableName)}`,
      ),
    )
    .addOption(
      new Option(
        "--iptables-backend <backend>",
        "iptables mode: nft (iptables-nft), legacy (iptables-legacy) or auto, the one the " +
          `node already uses${byDefault(d.iptablesBackend)}`,
      ).choices(["auto", "nft", "legacy"] as const),
    )
    .addOption(
      new Option(
        "--proxy-mode <mode>",
        'upstream spelling of --mode: nftables, iptables, ipvs or ""; ipvs runs nft mode ' +
          "with the --ipvs-* sync periods and scheduler (one warning says what else is ignored)",
      ),
    )
    .addOption(
      new Option(
        "--scheduler <scheduler>",
        "nft mode (an extension of kube-nftproxy): how a new connection picks its endpoint: " +
          "random, round-robin or source-hash (by client address)" +
          byDefault(d.scheduler),
      ).choices(["random", "round-robin", "source-hash"] as const),
    )
    .addOption(
      new Option(
        "--kubeconfig <path>",
        "kubeconfig file for the API server; empty means in-cluster config (or --master)",
      ),
    )
    .addOption(new Option("--master <url>", "API server URL, overriding the kubeconfig's"))
    .addOption(
      new Option(
        "--hostname-override <name>",
        "name of this node's Node object (node IPs, zone, pod CIDRs) " +
          "(default: $NODE_NAME, else the host name, lowercased)",
      ),
    )
    .addOption(
      new Option(
        "--bind-address <ip>",
        "this node's primary IP; 0.0.0.0 or :: means take the IPs from the Node object " +
          "(nothing binds to it; the name is historical; ignored with --config) (default: " +
          "0.0.0.0)",
      ),
    )
    .addOption(
      new Option(
        "--cluster-cidr <cidrs>",
        "pod network CIDRs, comma-separated, at most one per IP family; with " +
          "--detect-local-mode=ClusterCIDR, traffic from them is local (ignored with --config) " +
          "(default: none)",
      ),
    )
    .addOption(
      new Option(
        "--nodeport-addresses <cidrs>",
        "CIDRs, comma-separated, whose node addresses accept NodePorts (0.0.0.0/0, ::/0: every " +
          "local address), or 'primary' for the Node's primary IPs (ignored with --config) " +
          "(default: primary in nft mode, every local address in iptables mode)",
      ).argParser(collect),
    )
    .addOption(booleanFlag("--masquerade-all", "SNAT all traffic sent to service IPs"))
    .addOption(
      new Option(
        "--iptables-masquerade-bit <bit>",
        `bit (0-31) of the packet mark asking for SNAT, in both modes${byDefault(d.masqueradeBit)}`,
      ),
    )
    .addOption(
      durationOption(
        "--nftables-sync-period <duration>",
        `nft mode: longest time between full syncs, and the retry period`,
        d.syncPeriodMs,
      ),
    )
    .addOption(
      durationOption(
        "--nftables-min-sync-period <duration>",
        `nft mode: shortest time between syncs`,
        d.minSyncPeriodMs,
      ),
    )
    .addOption(
      durationOption(
        "--iptables-sync-period <duration>",
        `iptables mode: longest time between full syncs, and the retry period`,
        d.syncPeriodMs,
      ),
    )
    .addOption(
      durationOption(
        "--iptables-min-sync-period <duration>",
        `iptables mode: shortest time between syncs`,
        d.minSyncPeriodMs,
      ),
    )
    .addOption(
      durationOption(
        "--ipvs-sync-period <duration>",
        "ipvs mode (runs nft mode): longest time between full syncs, and the retry period",
        d.syncPeriodMs,
      ),
    )
    .addOption(
      durationOption(
        "--ipvs-min-sync-period <duration>",
        "ipvs mode (runs nft mode): shortest time between syncs",
        d.minSyncPeriodMs,
      ),
    )
    .addOption(
      new Option(
        "--ipvs-scheduler <name>",
        "ipvs mode: rr/wrr → round-robin, sh/mh → source-hash, lc, wlc, sed, nq, lblc, lblcr, " +
          "dh → random (see --scheduler) (default: rr)",
      ),
    )
    .addOption(
      new Option(
        "--ipvs-exclude-cidrs <cidrs>",
        "ipvs mode: accepted and ignored with a warning (no nftables meaning)",
      ).argParser(collect),
    )
    .addOption(
      booleanFlag("--ipvs-strict-arp", "ipvs mode: accepted and ignored with a warning"),
    )
    .addOption(
      new Option(
        "--ipvs-tcp-timeout <duration>",
        "ipvs mode: accepted and ignored with a warning (conntrack's timeouts apply)",
      ),
    )
    .addOption(
      new Option(
        "--ipvs-tcpfin-timeout <duration>",
        "ipvs mode: accepted and ignored with a warning (conntrack's timeouts apply)",
      ),
    )
    .addOption(
      new Option(
        "--ipvs-udp-timeout <duration>",
        "ipvs mode: accepted and ignored with a warning (conntrack's timeouts apply)",
      ),
    )
    .addOption(
      new Option(
        "--healthz-bind-address <ip:port>",
        `address of /healthz and /livez; a bare IP gets port ${DEFAULT_PORTS.healthz}; "" ` +
          `disables (ignored with --config)${byDefault(d.healthzBindAddress)}`,
      ),
    )
    .addOption(
      new Option(
        "--metrics-bind-address <ip:port>",
        `address of /metrics; a bare IP gets port ${DEFAULT_PORTS.metrics}; "" disables ` +
          `(ignored with --config)${byDefault(d.metricsBindAddress)}`,
      ),
    )
    .addOption(
      new Option(
        "--detect-local-mode <mode>",
        "how pod traffic is told from outside traffic: ClusterCIDR, NodeCIDR, " +
          "BridgeInterface or InterfaceNamePrefix (ignored with --config)" +
          byDefault(d.detectLocalMode),
      ),
    )
    .addOption(
      new Option(
        "--pod-bridge-interface <name>",
        "with --detect-local-mode=BridgeInterface: traffic from this bridge is local",
      ),
    )
    .addOption(
      new Option(
        "--pod-interface-name-prefix <prefix>",
        "with --detect-local-mode=InterfaceNamePrefix: traffic from interfaces with this " +
          "prefix is local",
      ),
    )
    .addOption(
      new Option(
        "--conntrack-max-per-core <n>",
        "conntrack entries per CPU: nf_conntrack_max is set to n × CPUs or to the " +
          `conntrack minimum, whichever is larger; 0 leaves it alone${
            byDefault(d.conntrackMaxPerCore)
          }`,
      ),
    )
    .addOption(
      new Option(
        "--conntrack-min <n>",
        `smallest nf_conntrack_max to set${byDefault(d.conntrackMin)}`,
      ),
    )
    .addOption(
      durationOption(
        "--conntrack-tcp-timeout-established <duration>",
        "idle timeout of established TCP connections in conntrack; 0 leaves it alone",
        d.conntrackTCPEstablishedTimeoutMs,
      ),
    )
    .addOption(
      durationOption(
        "--conntrack-tcp-timeout-close-wait <duration>",
        "conntrack timeout of TCP connections in CLOSE_WAIT; 0 leaves it alone",
        d.conntrackTCPCloseWaitTimeoutMs,
      ),
    )
    .addOption(
      booleanFlag(
        "--conntrack-tcp-be-liberal",
        "set nf_conntrack_tcp_be_liberal: out-of-window TCP packets are not marked INVALID",
      ),
    )
    .addOption(
      durationOption(
        "--conntrack-udp-timeout <duration>",
        "conntrack timeout of unreplied UDP flows; 0 leaves it alone",
        d.conntrackUDPTimeoutMs,
      ),
    )
    .addOption(
      durationOption(
        "--conntrack-udp-timeout-stream <duration>",
        "conntrack timeout of UDP flows that saw replies; 0 leaves it alone",
        d.conntrackUDPStreamTimeoutMs,
      ),
    )
    .addOption(
      new Option(
        "--write-config-to <path>",
        "write the resulting configuration there as a KubeProxyConfiguration, then exit",
      ),
    )
    .addOption(
      booleanFlag(
        "--cleanup-iptables",
        "remove the iptables rules (KUBE-* chains) kube-proxy left behind, then exit",
      ),
    )
    .addOption(
      booleanFlag(
        "--init-only",
        "do the start-up work that needs more than CAP_NET_ADMIN (the conntrack sysctls), " +
          "then exit; run the proxy again with CAP_NET_ADMIN only",
      ),
    )
    .addOption(
      new Option(
        "--oom-score-adj <n>",
        `the process's oom_score_adj, from -1000 to 1000 (ignored with --config)${
          byDefault(d.oomScoreAdj)
        }`,
      ),
    )
    .addOption(
      booleanFlag(
        "--bind-address-hard-fail",
        "end the process when the health or metrics address cannot be bound, instead of " +
          "retrying",
      ),
    )
    .addOption(
      new Option(
        "--healthz-port <port>",
        "deprecated, use --healthz-bind-address: the health server's port, 0 disables it " +
          "(ignored with --config)",
      ),
    )
    .addOption(
      new Option(
        "--metrics-port <port>",
        "deprecated, use --metrics-bind-address: the metrics server's port, 0 disables it " +
          "(ignored with --config)",
      ),
    )
    .addOption(
      new Option(
        "--max-cluster-file-bytes <bytes>",
        "an extension of ours: the largest --from-file file read (bytes, or with Ki, Mi, Gi)" +
          byDefault(`${d.maxClusterFileBytes / 2 ** 20}Mi`),
      ),
    )
    .addOption(
      new Option(
        "--max-list-bytes <bytes>",
        "an extension of ours: the largest LIST answer read from the API server (bytes, or " +
          `with Ki, Mi, Gi)${byDefault(`${d.maxListBytes / 2 ** 20}Mi`)}`,
      ),
    )
    .addOption(
      new Option(
        "--max-watch-event-bytes <bytes>",
        "an extension of ours: the largest watch event read from the API server (bytes, or " +
          `with Ki, Mi, Gi)${byDefault(`${d.maxWatchEventBytes / 2 ** 20}Mi`)}`,
      ),
    )
    .addOption(
      new Option(
        "--logging-format <format>",
        `log line format: text (klog's) or json${byDefault(d.loggingFormat)}`,
      ),
    )
    .addOption(
      durationOption(
        "--log-flush-frequency <duration>",
        "longest time a log line waits to be written (lines are written at once here)",
        5000,
      ),
    )
    .addOption(
      new Option(
        "--vmodule <patterns>",
        "per-file verbosity, pattern=N,...: accepted, no effect (-v applies to every line)",
      ),
    )
    .addOption(booleanFlag("--log-text-split-stream", "accepted, no effect (all lines to stderr)"))
    .addOption(
      new Option("--log-text-info-buffer-size <quantity>", "accepted, no effect (unbuffered)"),
    )
    .addOption(booleanFlag("--log-json-split-stream", "accepted, no effect (all lines to stderr)"))
    .addOption(
      new Option("--log-json-info-buffer-size <quantity>", "accepted, no effect (unbuffered)"),
    )
    .addOption(
      new Option(
        "--feature-gates <gates>",
        "Gate=true|false,...: accepted, no effect: kube-nftproxy has no feature gates (ignored " +
          "with --config)",
      ).argParser(collect),
    )
    .addOption(
      new Option(
        "--kube-api-content-type <type>",
        "content type of API requests: only application/json is spoken (protobuf is accepted " +
          "with a warning)",
      ),
    )
    .addOption(
      new Option(
        "--kube-api-qps <qps>",
        `API requests per second on average; 0 or below: no limit${byDefault(d.kubeApiQps)}`,
      ),
    )
    .addOption(
      new Option(
        "--kube-api-burst <n>",
        `API requests sent at once before --kube-api-qps applies${byDefault(d.kubeApiBurst)}`,
      ),
    )
    .addOption(
      durationOption(
        "--config-sync-period <duration>",
        "accepted, no effect: the watches need no periodic resync",
        15 * 60_000,
      ),
    )
    .addOption(
      booleanFlag(
        "--profiling",
        "accepted, no effect: no /debug/pprof (ignored with --config)",
      ),
    )
    .addOption(
      new Option(
        "--show-hidden-metrics-for-version <version>",
        "accepted, no effect: no metric is hidden (ignored with --config)",
      ),
    )
    .addOption(
      new Option(
        "--iptables-localhost-nodeports [bool]",
        "accepted; true has no effect: node ports are never served on 127.0.0.1 here",
      ),
    )
    .addOption(new Option("-v, --v <level>", `log verbosity${byDefault(d.verbosity)}`))
    .addOption(new Option("-h, --help", "show this help and exit"))
    .addOption(new Option("--version", "print the version and exit"));
}

/** The flags as parsed, before any value is checked. */
export type Flags = ReturnType<ReturnType<typeof declareFlags>["opts"]>;
