import assert from "node:assert/strict";
import { DEFAULT_CONFIG } from "./config.ts";
import { type CommandLine, parseCommandLine, type ParseCommandLineOptions } from "./flags.ts";
import { parseBytes } from "./upstream_flags.ts";

const HEADER = "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\n";

const IO: ParseCommandLineOptions = {
  readFile: (path) =>
    path === "kube-proxy.yaml"
      ? Promise.resolve(HEADER + "clusterCIDR: 10.244.0.0/16\n")
      : Promise.reject(new Deno.errors.NotFound(path)),
  env: () => undefined,
  hostname: () => "worker-1",
};

function parse(argv: string[]): Promise<CommandLine> {
  return parseCommandLine(argv, IO);
}

/** The effect a flag must have: a config field, an action, or a warning naming the flag. */
type Effect =
  | { config: Partial<CommandLine["config"]> }
  | { action: Partial<CommandLine["actions"]> }
  | { warning: RegExp }
  | { accepted: string };

/**
 * Every flag of upstream kube-proxy's cmd/kube-proxy/app/options.go (master, read 2026-11-25),
 * with component-base's logging flags: a value for each, and what it does here.
 */
const UPSTREAM_FLAGS: [string, string[], Effect][] = [
  ["--config", ["--config=kube-proxy.yaml"], { config: { clusterCIDRs: ["10.244.0.0/16"] } }],
  ["--write-config-to", ["--write-config-to=/tmp/x"], { action: { writeConfigTo: "/tmp/x" } }],
  ["--cleanup", ["--cleanup"], { action: { cleanup: true } }],
  ["--feature-gates", ["--feature-gates=Foo=true,Bar=false"], {
    warning:
      /flag --feature-gates=Foo=true,Bar=false has no effect: kube-nftproxy has no feature gates/,
  }],
  ["--kubeconfig", ["--kubeconfig=/etc/kp.conf"], { config: { kubeconfig: "/etc/kp.conf" } }],
  ["--master", ["--master=https://10.0.0.1:6443"], {
    config: { master: "https://10.0.0.1:6443" },
  }],
  ["--kube-api-content-type", ["--kube-api-content-type=application/vnd.kubernetes.protobuf"], {
    warning: /kube-api-content-type=application\/vnd.kubernetes.protobuf has no effect: .*JSON/,
  }],
  ["--kube-api-burst", ["--kube-api-burst=20"], { config: { kubeApiBurst: 20 } }],
  ["--kube-api-qps", ["--kube-api-qps=7.5"], { config: { kubeApiQps: 7.5 } }],
  ["--hostname-override", ["--hostname-override=Node-9"], { config: { hostname: "node-9" } }],
  ["--bind-address", ["--bind-address=10.0.0.9"], { config: { bindAddress: "10.0.0.9" } }],
  ["--healthz-bind-address", ["--healthz-bind-address=127.0.0.1:1"], {
    config: { healthzBindAddress: "127.0.0.1:1" },
  }],
  ["--metrics-bind-address", ["--metrics-bind-address=0.0.0.0"], {
    config: { metricsBindAddress: "0.0.0.0:10249" },
  }],
  ["--bind-address-hard-fail", ["--bind-address-hard-fail"], {
    config: { bindAddressHardFail: true },
  }],
  ["--profiling", ["--profiling"], { warning: /--profiling has no effect: no \/debug\/pprof/ }],
  ["--show-hidden-metrics-for-version", ["--show-hidden-metrics-for-version=1.30"], {
    warning: /--show-hidden-metrics-for-version has no effect/,
  }],
  ["--init-only", ["--init-only"], { action: { initOnly: true } }],
  ["--proxy-mode", ["--proxy-mode=iptables"], { config: { mode: "iptables" } }],
  ["--iptables-masquerade-bit", ["--iptables-masquerade-bit=3"], { config: { masqueradeBit: 3 } }],
  ["--masquerade-all", ["--masquerade-all"], { config: { masqueradeAll: true } }],
  ["--iptables-localhost-nodeports", ["--iptables-localhost-nodeports=true"], {
    warning: /--iptables-localhost-nodeports has no effect: node ports are never served on 127/,
  }],
  ["--iptables-sync-period", ["--iptables-sync-period=45s"], { config: { syncPeriodMs: 45_000 } }],
  ["--iptables-min-sync-period", ["--iptables-min-sync-period=2s"], {
    config: { minSyncPeriodMs: 2_000 },
  }],
  ["--ipvs-sync-period", ["--proxy-mode=ipvs", "--ipvs-sync-period=45s"], {
    config: { syncPeriodMs: 45_000 },
  }],
  ["--ipvs-min-sync-period", ["--proxy-mode=ipvs", "--ipvs-min-sync-period=2s"], {
    config: { minSyncPeriodMs: 2_000 },
  }],
  ["--ipvs-scheduler", ["--proxy-mode=ipvs", "--ipvs-scheduler=sh"], {
    config: { mode: "nft", scheduler: "source-hash" },
  }],
  ...([
    "exclude-cidrs=10.0.0.0/8",
    "strict-arp",
    "tcp-timeout=5s",
    "tcpfin-timeout=5s",
    "udp-timeout=5s",
  ]
    .map((arg): [string, string[], Effect] => {
      const flag = `--ipvs-${arg.replace(/=.*/, "")}`;
      return [flag, [`--ipvs-${arg}`], { warning: new RegExp(`ignoring ${flag} `) }];
    })),
  ["--detect-local-mode", ["--detect-local-mode=NodeCIDR"], {
    config: { detectLocalMode: "NodeCIDR" },
  }],
  ["--pod-bridge-interface", ["--pod-bridge-interface=cbr0"], {
    config: { bridgeInterface: "cbr0" },
  }],
  ["--pod-interface-name-prefix", ["--pod-interface-name-prefix=veth"], {
    config: { interfaceNamePrefix: "veth" },
  }],
  ["--cluster-cidr", ["--cluster-cidr=10.244.0.0/16"], {
    config: { clusterCIDRs: ["10.244.0.0/16"] },
  }],
  ["--nodeport-addresses", ["--nodeport-addresses=10.0.0.0/8"], {
    config: { nodePortAddresses: ["10.0.0.0/8"] },
  }],
  ["--oom-score-adj", ["--oom-score-adj=-500"], { config: { oomScoreAdj: -500 } }],
  ["--conntrack-max-per-core", ["--conntrack-max-per-core=0"], {
    config: { conntrackMaxPerCore: 0 },
  }],
  ["--conntrack-min", ["--conntrack-min=4096"], { config: { conntrackMin: 4096 } }],
  ["--conntrack-tcp-timeout-established", ["--conntrack-tcp-timeout-established=2h"], {
    config: { conntrackTCPEstablishedTimeoutMs: 7_200_000 },
  }],
  ["--conntrack-tcp-timeout-close-wait", ["--conntrack-tcp-timeout-close-wait=0"], {
    config: { conntrackTCPCloseWaitTimeoutMs: 0 },
  }],
  ["--conntrack-tcp-be-liberal", ["--conntrack-tcp-be-liberal"], {
    config: { conntrackTCPBeLiberal: true },
  }],
  ["--conntrack-udp-timeout", ["--conntrack-udp-timeout=30s"], {
    config: { conntrackUDPTimeoutMs: 30_000 },
  }],
  ["--conntrack-udp-timeout-stream", ["--conntrack-udp-timeout-stream=2m"], {
    config: { conntrackUDPStreamTimeoutMs: 120_000 },
  }],
  ["--config-sync-period", ["--config-sync-period=10m"], {
    warning: /--config-sync-period has no effect/,
  }],
  ["--healthz-port", ["--healthz-port=0"], { config: { healthzBindAddress: "" } }],
  ["--metrics-port", ["--metrics-port=9100"], {
    config: { metricsBindAddress: "127.0.0.1:9100" },
  }],
  ["--logging-format", ["--logging-format=json"], { config: { loggingFormat: "json" } }],
  ["--log-flush-frequency", ["--log-flush-frequency=1s"], {
    accepted: "every line is written at once, so no line waits longer",
  }],
  ["-v", ["-v=4"], { config: { verbosity: 4 } }],
  ["--v", ["--v=2"], { config: { verbosity: 2 } }],
  ["--vmodule", ["--vmodule=proxier*=5"], { warning: /--vmodule has no effect/ }],
  ["--log-text-split-stream", ["--log-text-split-stream"], {
    warning: /--log-text-split-stream has no effect/,
  }],
  ["--log-text-info-buffer-size", ["--log-text-info-buffer-size=64Ki"], {
    warning: /--log-text-info-buffer-size has no effect/,
  }],
  ["--log-json-split-stream", ["--log-json-split-stream=true"], {
    warning: /--log-json-split-stream has no effect/,
  }],
  ["--log-json-info-buffer-size", ["--log-json-info-buffer-size=1Mi"], {
    warning: /--log-json-info-buffer-size has no effect/,
  }],
  ["--help", ["--help"], { action: { showHelp: true } }],
  ["--version", ["--version"], { action: { showVersion: true } }],
];

Deno.test("parseCommandLine() accepts every flag of upstream kube-proxy, each with its meaning or a warning saying why it has none", async () => {
  for (const [flag, argv, effect] of UPSTREAM_FLAGS) {
    const parsed = await parse(argv);
    if ("config" in effect) {
      for (const [key, value] of Object.entries(effect.config)) {
        assert.deepEqual(parsed.config[key as keyof typeof parsed.config], value, flag);
      }
      const noEffect = parsed.warnings.filter((line) => line.includes(`${flag} has no effect`));
      assert.deepEqual(noEffect, [], flag);
    } else if ("action" in effect) {
      for (const [key, value] of Object.entries(effect.action)) {
        assert.equal(parsed.actions[key as keyof typeof parsed.actions], value, flag);
      }
    } else if ("warning" in effect) {
      const matching = parsed.warnings.filter((line) => effect.warning.test(line));
      assert.equal(matching.length, 1, `${flag}: ${parsed.warnings.join("\n")}`);
      assert.deepEqual({ ...parsed.config }, { ...DEFAULT_CONFIG, hostname: "worker-1" }, flag);
    } else {
      assert.deepEqual(parsed.warnings, [], `${flag} (${effect.accepted})`);
    }
  }
});

Deno.test("parseCommandLine() accepts upstream's boolean and space-separated spellings", async () => {
  for (const argv of [["--init-only=true"], ["--init-only", "true"], ["--init-only=t"]]) {
    assert.equal((await parse(argv)).actions.initOnly, true, argv.join(" "));
  }
  assert.equal((await parse(["--init-only=false"])).actions.initOnly, false);
  const quiet = await parse(["--profiling=false", "--iptables-localhost-nodeports=false"]);
  assert.deepEqual(quiet.warnings, []);
  const json = await parse(["--kube-api-content-type", "application/json"]);
  assert.deepEqual(json.warnings, []);
});

Deno.test("parseCommandLine() lets the deprecated port flags replace the port or disable the server", async () => {
  const { config, warnings } = await parse([
    "--healthz-bind-address=10.0.0.9:1234",
    "--healthz-port=4321",
    "--metrics-port=0",
  ]);
  assert.equal(config.healthzBindAddress, "10.0.0.9:4321");
  assert.equal(config.metricsBindAddress, "");
  assert.deepEqual(warnings, [
    "flag --healthz-port is deprecated: use --healthz-bind-address",
    "flag --metrics-port is deprecated: use --metrics-bind-address",
  ]);
  assert.equal((await parse(["--metrics-port=9100"])).config.metricsBindAddress, "127.0.0.1:9100");
});

Deno.test("parseCommandLine() reads the size limits in bytes or binary quantities", async () => {
  const { config } = await parse([
    "--max-cluster-file-bytes=1Gi",
    "--max-list-bytes=512Mi",
    "--max-watch-event-bytes=65536",
  ]);
  assert.equal(config.maxClusterFileBytes, 2 ** 30);
  assert.equal(config.maxListBytes, 512 * 2 ** 20);
  assert.equal(config.maxWatchEventBytes, 65536);
  assert.equal(parseBytes("64Ki"), 65536);
  assert.ok(Number.isNaN(parseBytes("64KB")));
});

Deno.test("parseCommandLine() rejects bad values of upstream's flags, naming the flag", async () => {
  const cases: [string[], RegExp][] = [
    [
      ["--oom-score-adj=-1001"],
      /flag --oom-score-adj is -1001, must be in the range \[-1000, 1000\]$/,
    ],
    [["--oom-score-adj=low"], /flag --oom-score-adj is "low", must be a whole number$/],
    [["--logging-format=xml"], /flag --logging-format is "xml", must be "text" or "json"$/],
    [["--healthz-port=70000"], /flag --healthz-port is "70000", must be 0-65535$/],
    [["--config-sync-period=0s"], /flag --config-sync-period is "0s", must be greater than 0$/],
    [["--log-flush-frequency=5"], /flag --log-flush-frequency is "5", must be a duration/],
    [["--feature-gates=Foo"], /flag --feature-gates is "Foo", must be Gate=true\|false,...$/],
    [["--kube-api-qps=fast"], /flag --kube-api-qps is "fast", must be a number$/],
    [["--kube-api-burst=1.5"], /flag --kube-api-burst is "1.5", must be a whole number$/],
    [["--vmodule=proxier"], /flag --vmodule is "proxier", must be pattern=N,...$/],
    [["--max-list-bytes=0"], /flag --max-list-bytes is "0", must be a whole number above 0$/],
    [["--max-list-bytes=1MB"], /flag --max-list-bytes is "1MB", must be a whole number above 0$/],
    [["--bind-address-hard-fail=yes"], /must be true or false/],
  ];
  for (const [argv, message] of cases) {
    await assert.rejects(parse(argv), message, argv.join(" "));
  }
});

Deno.test("DEFAULT_CONFIG's size limits are the sources' own defaults", async () => {
  const { DEFAULT_MAX_FILE_BYTES } = await import("../source/file_source.ts");
  const { DEFAULT_MAX_EVENT_BYTES, DEFAULT_MAX_LIST_BYTES } = await import(
    "../source/reflector_options.ts"
  );
  assert.equal(DEFAULT_CONFIG.maxClusterFileBytes, DEFAULT_MAX_FILE_BYTES);
  assert.equal(DEFAULT_CONFIG.maxListBytes, DEFAULT_MAX_LIST_BYTES);
  assert.equal(DEFAULT_CONFIG.maxWatchEventBytes, DEFAULT_MAX_EVENT_BYTES);
});
