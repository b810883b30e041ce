import assert from "node:assert/strict";
import { type Config, DEFAULT_CONFIG } from "./config.ts";
import { ConfigError } from "./config_error.ts";
import {
  type CommandLine,
  helpText,
  parseCommandLine,
  type ParseCommandLineOptions,
  toKubeProxyConfiguration,
} from "./flags.ts";
import { parseKubeProxyConfiguration } from "./kubeproxy_config.ts";

const KUBEADM_CONFIG_MAP = new URL(
  "../../tests/fixtures/kubeadm-kube-proxy-configmap.yaml",
  import.meta.url,
);

const HEADER = "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\n";

/** I/O for tests: files from `files`, no NODE_NAME unless given, host name "Worker-1". */
function io(
  files: Record<string, string> = {},
  env: Record<string, string> = {},
): Required<ParseCommandLineOptions> {
  return {
    readFile: (path) =>
      path in files
        ? Promise.resolve(files[path])
        : Promise.reject(new Deno.errors.NotFound(`no such file: ${path}`)),
    env: (name) => env[name],
    hostname: () => "Worker-1",
  };
}

/** Parses `argv` with a kube-proxy.yaml made of HEADER plus `file` (when given). */
function parse(argv: string[], file?: string): Promise<CommandLine> {
  return parseCommandLine(argv, io(file === undefined ? {} : { "kube-proxy.yaml": HEADER + file }));
}

/** The config `overrides` describe, over the defaults, for host "worker-1". */
function expected(overrides: Partial<Config>): Config {
  return { ...DEFAULT_CONFIG, hostname: "worker-1", ...overrides };
}

/** Asserts that parsing fails with exactly `message`. */
async function assertFails(promise: Promise<unknown>, message: string): Promise<void> {
  await assert.rejects(promise, (error: unknown) => {
    assert.ok(error instanceof ConfigError, `not a ConfigError: ${error}`);
    assert.equal(error.message, message);
    return true;
  });
}

const NO_ACTIONS = {
  once: false,
  dryRun: false,
  output: "text",
  cleanup: false,
  cleanupIptables: false,
  initOnly: false,
  writeConfigTo: "",
  showVersion: false,
  showHelp: false,
};

// --- defaults and the node name ----------------------------------------------------------------

Deno.test("parseCommandLine() gives the defaults and the lowercased host name for no flags", async () => {
  assert.deepEqual(await parse([]), {
    config: expected({}),
    actions: NO_ACTIONS,
    warnings: [],
  });
});

Deno.test("parseCommandLine() takes the node name from NODE_NAME before the host name", async () => {
  const { config } = await parseCommandLine([], io({}, { NODE_NAME: " Node-A " }));
  assert.equal(config.hostname, "node-a");
});

Deno.test("parseCommandLine() takes the node name from the file, then the flag, over NODE_NAME", async () => {
  const files = { "kp.yaml": HEADER + "hostnameOverride: from-file\n" };
  const env = { NODE_NAME: "from-env" };
  assert.equal(
    (await parseCommandLine(["--config", "kp.yaml"], io(files, env))).config.hostname,
    "from-file",
  );
  assert.equal(
    (await parseCommandLine(
      ["--config", "kp.yaml", "--hostname-override=From-Flag"],
      io(files, env),
    ))
      .config.hostname,
    "from-flag",
  );
});

Deno.test("parseCommandLine() falls back to NODE_NAME when --hostname-override is empty, as kube-proxy does", async () => {
  const { config } = await parseCommandLine(["--hostname-override="], io({}, { NODE_NAME: "n1" }));
  assert.equal(config.hostname, "n1");
});

Deno.test("parseCommandLine() fails when no node name can be found", async () => {
  await assertFails(
    parseCommandLine([], { ...io(), hostname: () => " " }),
    'the host name is "", must be set (no --hostname-override, hostnameOverride or NODE_NAME)',
  );
});

// --- mode --------------------------------------------------------------------------------------

Deno.test("parseCommandLine() accepts both --mode=nft and --mode nft", async () => {
  for (const argv of [["--mode=iptables"], ["--mode", "iptables"]]) {
    assert.equal((await parse(argv)).config.mode, "iptables");
  }
  for (const argv of [["--mode=nft"], ["--mode", "nft"]]) {
    assert.equal((await parse(argv)).config.mode, "nft");
  }
});

Deno.test("parseCommandLine() reads upstream's --proxy-mode", async () => {
  assert.equal((await parse(["--proxy-mode=iptables"])).config.mode, "iptables");
  assert.equal((await parse(["--proxy-mode", "nftables"])).config.mode, "nft");
  assert.equal((await parse(["--proxy-mode="])).config.mode, "nft");
  assert.equal((await parse(["--mode=nft", "--proxy-mode=nftables"])).config.mode, "nft");
});

Deno.test("parseCommandLine() rejects bad and contradicting modes", async () => {
  await assertFails(
    parse(["--mode=nftables"]),
    'flag --mode is "nftables", must be nft or iptables',
  );
  await assertFails(
    parse(["--proxy-mode=kernelspace"]),
    'flag --proxy-mode is "kernelspace", must be "nftables", "iptables", "ipvs" or "" ' +
      "(the default, nftables): kube-nftproxy has no kernelspace mode",
  );
  await assertFails(
    parse(["--mode=nft", "--proxy-mode=iptables"]),
    'flag --proxy-mode is "iptables", must agree with --mode=nft (give one of them)',
  );
});

// --- precedence --------------------------------------------------------------------------------

const FILE = "mode: iptables\nclusterCIDR: 10.244.0.0/16\nhealthzBindAddress: 0.0.0.0:9999\n" +
  "iptables:\n  masqueradeAll: true\n  masqueradeBit: 12\n  syncPeriod: 1m0s\n" +
  "nftables:\n  masqueradeBit: 20\n  syncPeriod: 2m0s\n";

Deno.test("parseCommandLine() puts the config file over the defaults", async () => {
  const { config } = await parse(["--config", "kube-proxy.yaml"], FILE);
  assert.deepEqual(
    config,
    expected({
      mode: "iptables",
      clusterCIDRs: ["10.244.0.0/16"],
      healthzBindAddress: "0.0.0.0:9999",
      masqueradeAll: true,
      masqueradeBit: 12,
      syncPeriodMs: 60_000,
    }),
  );
});

Deno.test("parseCommandLine() puts flags actually given over the config file", async () => {
  const { config, warnings } = await parse(
    ["--config=kube-proxy.yaml", "--iptables-sync-period", "2m", "--masquerade-all=false", "-v=3"],
    FILE,
  );
  assert.deepEqual(
    config,
    expected({
      mode: "iptables",
      clusterCIDRs: ["10.244.0.0/16"],
      healthzBindAddress: "0.0.0.0:9999",
      masqueradeBit: 12,
      syncPeriodMs: 120_000,
      verbosity: 3,
    }),
  );
  assert.deepEqual(warnings.filter((line) => line.includes("flag")), []);
});

Deno.test("parseCommandLine() ignores the flags upstream ignores with --config, naming them in one warning", async () => {
  const { config, warnings } = await parse(
    [
      "--config=kube-proxy.yaml",
      "--cluster-cidr=fd00:10:244::/56",
      "--bind-address=10.0.0.9",
      "--healthz-bind-address=127.0.0.1:1",
      "--metrics-bind-address=",
      "--healthz-port=0",
      "--metrics-port=9",
      "--proxy-mode=nftables",
      "--detect-local-mode=NodeCIDR",
      "--nodeport-addresses=primary",
      "--oom-score-adj=-5",
      "--feature-gates=A=true",
      "--profiling",
      "--show-hidden-metrics-for-version=1.30",
      "--hostname-override=Node-2",
      "--logging-format=json",
    ],
    FILE,
  );
  // The file's values stand; --hostname-override and the logging flags still win, as upstream.
  assert.deepEqual(
    config,
    expected({
      mode: "iptables",
      hostname: "node-2",
      clusterCIDRs: ["10.244.0.0/16"],
      healthzBindAddress: "0.0.0.0:9999",
      masqueradeAll: true,
      masqueradeBit: 12,
      syncPeriodMs: 60_000,
      loggingFormat: "json",
    }),
  );
  assert.deepEqual(warnings.filter((line) => line.includes("flag")), [
    "ignoring flags --feature-gates, --bind-address, --healthz-bind-address, " +
    "--metrics-bind-address, --healthz-port, --metrics-port, --profiling, " +
    "--show-hidden-metrics-for-version, --proxy-mode, --detect-local-mode, --cluster-cidr, " +
    "--nodeport-addresses, --oom-score-adj: upstream kube-proxy ignores them when a config file " +
    "is given (--config kube-proxy.yaml); set the file's fields instead",
  ]);
});

Deno.test("parseCommandLine() reads the file section of the mode given by flag", async () => {
  const { config } = await parse(["--config=kube-proxy.yaml", "--mode=nft"], FILE);
  assert.equal(config.mode, "nft");
  assert.equal(config.masqueradeAll, false);
  assert.equal(config.masqueradeBit, 20);
  assert.equal(config.syncPeriodMs, 120_000);
});

Deno.test("parseCommandLine() applies --iptables-*-sync-period in every mode, as upstream, and --nftables-* in nft mode over them", async () => {
  const nft = await parse(["--iptables-sync-period=10s", "--iptables-min-sync-period=2s"]);
  assert.equal(nft.config.syncPeriodMs, 10_000);
  assert.equal(nft.config.minSyncPeriodMs, 2_000);
  const both = await parse(["--nftables-sync-period=45s", "--iptables-sync-period=10s"]);
  assert.equal(both.config.syncPeriodMs, 45_000);
  const iptables = await parse([
    "--mode=iptables",
    "--nftables-min-sync-period=5s",
    "--iptables-min-sync-period=100ms",
  ]);
  assert.equal(iptables.config.minSyncPeriodMs, 100);
  const overFile = await parse(
    ["--config=kube-proxy.yaml", "--iptables-sync-period=3m"],
    "mode: nftables\nnftables:\n  syncPeriod: 1m\n",
  );
  assert.equal(overFile.config.syncPeriodMs, 180_000);
});

Deno.test("parseCommandLine() reads --bind-address 0.0.0.0 as no bind address", async () => {
  assert.equal((await parse(["--bind-address=0.0.0.0"])).config.bindAddress, "");
  assert.equal((await parse(["--bind-address=fd00::5"])).config.bindAddress, "fd00::5");
});

Deno.test("parseCommandLine() loads kubeadm's kube-proxy ConfigMap unchanged", async () => {
  const text = await Deno.readTextFile(KUBEADM_CONFIG_MAP);
  const { config } = await parseCommandLine(
    ["--config", "/var/lib/kube-proxy/config.conf", "--hostname-override", "cp-1"],
    io({ "/var/lib/kube-proxy/config.conf": text }),
  );
  assert.deepEqual(
    config,
    expected({
      hostname: "cp-1",
      clusterCIDRs: ["10.244.0.0/16"],
      kubeconfig: "/var/lib/kube-proxy/kubeconfig.conf",
    }),
  );
});

// --- values ------------------------------------------------------------------------------------

Deno.test("parseCommandLine() reads every value flag", async () => {
  const { config } = await parse([
    "--mode=iptables",
    "--kubeconfig=/etc/kp.conf",
    "--master",
    "https://10.0.0.1:6443",
    "--hostname-override=Node-9",
    "--bind-address=10.0.0.9",
    "--cluster-cidr=10.244.0.0/16,fd00:10:244::/56",
    "--nodeport-addresses=10.0.0.0/8",
    "--masquerade-all",
    "--iptables-masquerade-bit=0",
    "--iptables-sync-period=1h2m3.5s",
    "--iptables-min-sync-period=0",
    "--healthz-bind-address=10.0.0.9",
    "--metrics-bind-address=::",
    "--detect-local-mode=BridgeInterface",
    "--pod-bridge-interface=cbr0",
    "--pod-interface-name-prefix=veth",
    "--table-name=edge-proxy",
    "--iptables-backend=legacy",
    "--from-file=cluster.yaml",
    "--conntrack-max-per-core=0",
    "--conntrack-min=4096",
    "--conntrack-tcp-timeout-established=2h",
    "--conntrack-tcp-timeout-close-wait=0",
    "--conntrack-tcp-be-liberal",
    "--conntrack-udp-timeout=30s",
    "--conntrack-udp-timeout-stream=2m",
    "-v",
    "4",
  ]);
  assert.deepEqual(config, {
    mode: "iptables",
    hostname: "node-9",
    clusterCIDRs: ["10.244.0.0/16", "fd00:10:244::/56"],
    detectLocalMode: "BridgeInterface",
    bridgeInterface: "cbr0",
    interfaceNamePrefix: "veth",
    nodePortAddresses: ["10.0.0.0/8"],
    masqueradeAll: true,
    masqueradeBit: 0,
    minSyncPeriodMs: 0,
    syncPeriodMs: 3_723_500,
    bindAddress: "10.0.0.9",
    healthzBindAddress: "10.0.0.9:10256",
    metricsBindAddress: "[::]:10249",
    tableName: "edge-proxy",
    iptablesBackend: "legacy",
    kubeconfig: "/etc/kp.conf",
    master: "https://10.0.0.1:6443",
    kubeApiQps: 5,
    kubeApiBurst: 10,
    fromFile: "cluster.yaml",
    verbosity: 4,
    loggingFormat: "text",
    scheduler: "random",
    bindAddressHardFail: false,
    oomScoreAdj: -999,
    maxClusterFileBytes: DEFAULT_CONFIG.maxClusterFileBytes,
    maxListBytes: DEFAULT_CONFIG.maxListBytes,
    maxWatchEventBytes: DEFAULT_CONFIG.maxWatchEventBytes,
    conntrackMaxPerCore: 0,
    conntrackMin: 4096,
    conntrackTCPEstablishedTimeoutMs: 7_200_000,
    conntrackTCPCloseWaitTimeoutMs: 0,
    conntrackTCPBeLiberal: true,
    conntrackUDPTimeoutMs: 30_000,
    conntrackUDPStreamTimeoutMs: 120_000,
  });
  await assert.rejects(
    parse(["--conntrack-tcp-timeout-established=90m30.5s"]),
    /flag --conntrack-tcp-timeout-established is "90m30.5s", must be whole seconds/,
  );
  await assert.rejects(
    parse(["--conntrack-max-per-core=lots"]),
    /flag --conntrack-max-per-core is "lots", must be a whole number/,
  );
});

Deno.test("parseCommandLine() accumulates repeated --nodeport-addresses, as pflag does", async () => {
  const { config } = await parse([
    "--nodeport-addresses=10.0.0.0/8,192.168.0.0/16",
    "--nodeport-addresses",
    "fd00::/64",
  ]);
  assert.deepEqual(config.nodePortAddresses, ["10.0.0.0/8", "192.168.0.0/16", "fd00::/64"]);
  const cleared = await parse(["--nodeport-addresses="]);
  assert.deepEqual(cleared.config.nodePortAddresses, []);
});

Deno.test("parseCommandLine() reads -v in klog's spellings", async () => {
  for (const argv of [["-v", "2"], ["-v=2"], ["-v2"], ["--v=2"], ["--v", "2"]]) {
    assert.equal((await parse(argv)).config.verbosity, 2, argv.join(" "));
  }
});

Deno.test("parseCommandLine() lets an empty server address disable the server", async () => {
  const { config } = await parse(["--healthz-bind-address=", "--metrics-bind-address="]);
  assert.equal(config.healthzBindAddress, "");
  assert.equal(config.metricsBindAddress, "");
});

// --- actions -----------------------------------------------------------------------------------

Deno.test("parseCommandLine() reports the actions asked for", async () => {
  const { actions } = await parse([
    "--once",
    "--dry-run=true",
    "--cleanup",
    "--cleanup-iptables=true",
    "--init-only",
    "--output=json",
    "--write-config-to",
    "/tmp/kp.yaml",
  ]);
  assert.deepEqual(actions, {
    ...NO_ACTIONS,
    once: true,
    dryRun: true,
    output: "json",
    cleanup: true,
    cleanupIptables: true,
    initOnly: true,
    writeConfigTo: "/tmp/kp.yaml",
  });
  assert.equal((await parse(["--cleanup=false"])).actions.cleanup, false);
  assert.equal((await parse(["--cleanup", "0"])).actions.cleanup, false);
  await assert.rejects(parse(["--output=yaml"]), /--output.*yaml.*text, json|yaml.*not one of/i);
});

Deno.test("parseCommandLine() answers --help and --version without reading or validating", async () => {
  const options = {
    ...io(),
    readFile: () => Promise.reject(new Error("must not read")),
    hostname: () => "",
  };
  for (const argv of [["-h"], ["--help"]]) {
    const { config, actions } = await parseCommandLine(
      [...argv, "--config=x", "--mode=nft"],
      options,
    );
    assert.deepEqual(actions, { ...NO_ACTIONS, showHelp: true });
    assert.deepEqual(config, { ...DEFAULT_CONFIG });
  }
  const { actions } = await parseCommandLine(["--version", "--iptables-sync-period=-1s"], options);
  assert.deepEqual(actions, { ...NO_ACTIONS, showVersion: true });
});

// --- errors ------------------------------------------------------------------------------------

Deno.test("parseCommandLine() rejects what the command line cannot mean", async () => {
  const cases: [string[], string][] = [
    [["--foo"], "command line: unknown option '--foo'"],
    [["--mod", "nft"], "command line: unknown option '--mod'\n(Did you mean --mode?)"],
    [["demo"], "command line: too many arguments. Expected 0 arguments but got 1: demo."],
    [["--mode"], "command line: option '--mode <mode>' argument missing"],
    [["--version=raw"], "command line: unknown option '--version=raw'"],
  ];
  for (const [argv, message] of cases) {
    await assertFails(parse(argv), message);
  }
});

Deno.test("parseCommandLine() rejects bad flag values, naming the flag", async () => {
  const duration = "must be a duration such as 30s, 1m0s or 500ms";
  const cases: [string[], string][] = [
    [["--iptables-masquerade-bit=40"], "flag --iptables-masquerade-bit is 40, must be 0-31"],
    [["--iptables-masquerade-bit=0x4"], 'flag --iptables-masquerade-bit is "0x4", must be 0-31'],
    [["--masquerade-all=yes"], 'flag --masquerade-all is "yes", must be true or false'],
    [["--cleanup-iptables=2"], 'flag --cleanup-iptables is "2", must be true or false'],
    [["--once=maybe"], 'flag --once is "maybe", must be true or false'],
    [
      ["--nftables-sync-period=30"],
      `flag --nftables-sync-period is "30", ${duration} (time: missing unit in duration "30")`,
    ],
    [["--nftables-sync-period=0s"], 'flag --nftables-sync-period is "0s", must be greater than 0'],
    [
      ["--iptables-min-sync-period=-1s"],
      'flag --iptables-min-sync-period is "-1s", must be greater than or equal to 0',
    ],
    [
      ["--cluster-cidr=10.0.0.0/8,10.1.0.0/16"],
      'flag --cluster-cidr is "10.0.0.0/8,10.1.0.0/16", must be a CIDR or a comma-separated ' +
      "IPv4,IPv6 pair of CIDRs (at most one per IP family)",
    ],
    [
      ["--cluster-cidr=10.0.0.0"],
      'flag --cluster-cidr is "10.0.0.0", must be a CIDR or a comma-separated IPv4,IPv6 pair ' +
      'of CIDRs ("10.0.0.0" is not a CIDR)',
    ],
    [
      ["--nodeport-addresses=primary,10.0.0.0/8"],
      'flag --nodeport-addresses[0] is "primary", must be the only entry ("primary" cannot be ' +
      "combined with CIDRs)",
    ],
    [
      ["--nodeport-addresses=10.0.0.0/8, 10.1.0.0/16"],
      'flag --nodeport-addresses[1] is " 10.1.0.0/16", must be a CIDR or "primary"',
    ],
    [
      ["--detect-local-mode=None"],
      'flag --detect-local-mode is "None", must be one of ClusterCIDR, NodeCIDR, ' +
      'BridgeInterface, InterfaceNamePrefix or ""',
    ],
    [
      ["--detect-local-mode=BridgeInterface"],
      'flag --detect-local-mode is "BridgeInterface", needs a bridge interface ' +
      "(detectLocal.bridgeInterface/--pod-bridge-interface)",
    ],
    [
      ["--detect-local-mode=InterfaceNamePrefix", "--pod-interface-name-prefix="],
      'flag --detect-local-mode is "InterfaceNamePrefix", needs an interface name prefix ' +
      "(detectLocal.interfaceNamePrefix/--pod-interface-name-prefix)",
    ],
    [
      ["--healthz-bind-address=localhost"],
      'flag --healthz-bind-address is "localhost", must be IP:port with a port 1-65535, ' +
      "e.g. 0.0.0.0:10256",
    ],
    [
      ["--metrics-bind-address=127.0.0.1:70000"],
      'flag --metrics-bind-address is "127.0.0.1:70000", must be IP:port with a port 1-65535, ' +
      "e.g. 0.0.0.0:10256",
    ],
    [["--bind-address=node-1"], 'flag --bind-address is "node-1", must be an IP address'],
    [["--bind-address="], 'flag --bind-address is "", must be an IP address'],
    [
      ["--table-name=kube proxy"],
      'flag --table-name is "kube proxy", must start with a letter and hold only letters, ' +
      "digits, _, - and . (at most 255)",
    ],
    [["-v", "high"], 'flag -v is "high", must be a whole number >= 0'],
    [["-v=-1"], 'flag -v is "=-1", must be a whole number >= 0'],
  ];
  for (const [argv, message] of cases) {
    await assertFails(parse(argv), message);
  }
});

Deno.test("parseCommandLine() rejects a minimum sync period above the sync period, naming both", async () => {
  await assertFails(
    parse(["--nftables-min-sync-period=1m"]),
    'flag --nftables-min-sync-period is "1m0s", must be less than or equal to the sync period ' +
      "(30s, default nftables.syncPeriod/--nftables-sync-period)",
  );
  await assertFails(
    parse(
      ["--config=kube-proxy.yaml", "--nftables-sync-period=5s"],
      "mode: nftables\nnftables:\n  minSyncPeriod: 10s\n",
    ),
    'config kube-proxy.yaml: nftables.minSyncPeriod is "10s", must be less than or equal to the ' +
      "sync period (5s, flag --nftables-sync-period)",
  );
});

Deno.test("parseCommandLine() names the file when its settings contradict each other", async () => {
  await assertFails(
    parse(["--config=kube-proxy.yaml"], "detectLocalMode: BridgeInterface\n"),
    'config kube-proxy.yaml: detectLocalMode is "BridgeInterface", needs a bridge interface ' +
      "(detectLocal.bridgeInterface/--pod-bridge-interface)",
  );
  const { config } = await parse(
    ["--config=kube-proxy.yaml", "--pod-bridge-interface=cbr0"],
    "detectLocalMode: BridgeInterface\n",
  );
  assert.equal(config.bridgeInterface, "cbr0");
});

Deno.test("parseCommandLine() reports an unreadable or invalid config file", async () => {
  await assertFails(
    parse(["--config=missing.yaml"]),
    "config missing.yaml: cannot read: no such file: missing.yaml",
  );
  await assertFails(
    parse(["--config", "kube-proxy.yaml"], "iptables:\n  masqueradeBit: 40\n"),
    "config kube-proxy.yaml: iptables.masqueradeBit is 40, must be 0-31",
  );
});

// --- help and --write-config-to ----------------------------------------------------------------

const ALL_FLAGS = [
  "--mode <mode>",
  "--config <path>",
  "--from-file <path>",
  "--once [bool]",
  "--dry-run [bool]",
  "--output <format>",
  "--cleanup [bool]",
  "--table-name <name>",
  "--iptables-backend <backend>",
  "--proxy-mode <mode>",
  "--kubeconfig <path>",
  "--master <url>",
  "--hostname-override <name>",
  "--bind-address <ip>",
  "--cluster-cidr <cidrs>",
  "--nodeport-addresses <cidrs>",
  "--masquerade-all [bool]",
  "--iptables-masquerade-bit <bit>",
  "--nftables-sync-period <duration>",
  "--nftables-min-sync-period <duration>",
  "--iptables-sync-period <duration>",
  "--iptables-min-sync-period <duration>",
  "--healthz-bind-address <ip:port>",
  "--metrics-bind-address <ip:port>",
  "--detect-local-mode <mode>",
  "--pod-bridge-interface <name>",
  "--pod-interface-name-prefix <prefix>",
  "--conntrack-max-per-core <n>",
  "--conntrack-min <n>",
  "--conntrack-tcp-timeout-established <duration>",
  "--conntrack-tcp-timeout-close-wait <duration>",
  "--conntrack-tcp-be-liberal [bool]",
  "--conntrack-udp-timeout <duration>",
  "--conntrack-udp-timeout-stream <duration>",
  "--write-config-to <path>",
  "--cleanup-iptables [bool]",
  "--init-only [bool]",
  "--oom-score-adj <n>",
  "--bind-address-hard-fail [bool]",
  "--healthz-port <port>",
  "--metrics-port <port>",
  "--max-cluster-file-bytes <bytes>",
  "--max-list-bytes <bytes>",
  "--max-watch-event-bytes <bytes>",
  "--logging-format <format>",
  "--log-flush-frequency <duration>",
  "--vmodule <patterns>",
  "--log-text-split-stream [bool]",
  "--log-text-info-buffer-size <quantity>",
  "--log-json-split-stream [bool]",
  "--log-json-info-buffer-size <quantity>",
  "--feature-gates <gates>",
  "--kube-api-content-type <type>",
  "--kube-api-qps <qps>",
  "--kube-api-burst <n>",
  "--config-sync-period <duration>",
  "--profiling [bool]",
  "--show-hidden-metrics-for-version <version>",
  "--iptables-localhost-nodeports [bool]",
  "--scheduler <scheduler>",
  "--ipvs-sync-period <duration>",
  "--ipvs-min-sync-period <duration>",
  "--ipvs-scheduler <name>",
  "--ipvs-exclude-cidrs <cidrs>",
  "--ipvs-strict-arp [bool]",
  "--ipvs-tcp-timeout <duration>",
  "--ipvs-tcpfin-timeout <duration>",
  "--ipvs-udp-timeout <duration>",
  "-v, --v <level>",
  "-h, --help",
  "--version",
];

Deno.test("helpText() lists every flag", () => {
  const lines = helpText().split("\n").map((line) => line.trim());
  for (const flag of ALL_FLAGS) {
    assert.ok(lines.some((line) => line.startsWith(`${flag} `)), `${flag} missing from help`);
  }
  // Flags start at the left margin of the options list; wrapped descriptions are indented.
  const listed = helpText().split("\n").filter((line) => /^ {2}-/.test(line)).length;
  assert.equal(listed, ALL_FLAGS.length);
});

Deno.test("helpText() shows the defaults of the flags that have one", () => {
  const help = helpText().replace(/\s+/g, " ");
  for (
    const text of [
      "(default: nft)",
      "(default: kube-nftproxy)",
      "(default: 14)",
      "(default: 30s)",
      "(default: 1s)",
      "(default: 0.0.0.0:10256)",
      "(default: 127.0.0.1:10249)",
      "(default: ClusterCIDR)",
      "(default: primary in nft mode, every local address in iptables mode)",
      "(default: 0.0.0.0)",
      "(default: $NODE_NAME, else the host name, lowercased)",
    ]
  ) {
    assert.ok(help.includes(text), `${text} missing from help`);
  }
});

Deno.test("toKubeProxyConfiguration() from flags writes a file that --config reads back the same", async () => {
  const first = await parse([
    "--mode=iptables",
    "--cluster-cidr=10.244.0.0/16",
    "--masquerade-all",
    "--iptables-sync-period=1m",
    "--iptables-min-sync-period=2s",
    "--detect-local-mode=NodeCIDR",
    "--nodeport-addresses=primary",
    "--healthz-bind-address=0.0.0.0:12345",
    "-v=3",
  ]);
  const text = toKubeProxyConfiguration(first.config);
  const second = await parseCommandLine(["--config=written.yaml"], io({ "written.yaml": text }));
  assert.deepEqual(second.config, first.config);
  assert.deepEqual(parseKubeProxyConfiguration(text).mode, "iptables");
});
