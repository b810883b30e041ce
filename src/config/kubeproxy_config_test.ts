import assert from "node:assert/strict";
import { load } from "js-yaml";
import { type Config, DEFAULT_CONFIG } from "./config.ts";
import { ConfigError } from "./config_error.ts";
import { parseKubeProxyConfiguration, toKubeProxyConfiguration } from "./kubeproxy_config.ts";

const KUBEADM_CONFIG_MAP = new URL(
  "../../tests/fixtures/kubeadm-kube-proxy-configmap.yaml",
  import.meta.url,
);

const HEADER = "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\n";

/** Parses a KubeProxyConfiguration made of HEADER plus `body`, as kube-proxy.yaml. */
function parse(body: string, mode?: Config["mode"]): Partial<Config> {
  return parseKubeProxyConfiguration(HEADER + body, { source: "kube-proxy.yaml", mode });
}

/** Parses HEADER plus `body`, collecting the warnings. */
function parseWarning(body: string): { result: Partial<Config>; warnings: string[] } {
  const warnings: string[] = [];
  const result = parseKubeProxyConfiguration(HEADER + body, {
    source: "kube-proxy.yaml",
    onWarning: (line) => warnings.push(line),
  });
  return { result, warnings };
}

/** Asserts that parsing HEADER plus `body` fails with exactly `message`. */
function assertRejects(body: string, message: string, mode?: Config["mode"]): void {
  assert.throws(() => parse(body, mode), (error: unknown) => {
    assert.ok(error instanceof ConfigError, `not a ConfigError: ${error}`);
    assert.equal(error.message, message);
    return true;
  });
}

async function sha256(text: string): Promise<string> {
  const digest = await crypto.subtle.digest("SHA-256", new TextEncoder().encode(text));
  return [...new Uint8Array(digest)].map((byte) => byte.toString(16).padStart(2, "0")).join("");
}

// --- kubeadm ----------------------------------------------------------------------------------

Deno.test("parseKubeProxyConfiguration() loads kubeadm's v1.31 kube-proxy ConfigMap unchanged", async () => {
  const text = await Deno.readTextFile(KUBEADM_CONFIG_MAP);
  assert.deepEqual(parseKubeProxyConfiguration(text, { source: "kube-proxy-configmap.yaml" }), {
    clusterCIDRs: ["10.244.0.0/16"],
    kubeconfig: "/var/lib/kube-proxy/kubeconfig.conf",
  });
});

Deno.test("parseKubeProxyConfiguration() loads the config.conf kubeadm mounts into the pod", async () => {
  const configMap = load(await Deno.readTextFile(KUBEADM_CONFIG_MAP)) as {
    data: Record<string, string>;
  };
  assert.deepEqual(parseKubeProxyConfiguration(configMap.data["config.conf"]), {
    clusterCIDRs: ["10.244.0.0/16"],
    kubeconfig: "/var/lib/kube-proxy/kubeconfig.conf",
  });
});

Deno.test("the kubeadm ConfigMap fixture still carries kubeadm's own data as signed", async () => {
  const configMap = load(await Deno.readTextFile(KUBEADM_CONFIG_MAP)) as {
    data: Record<string, string>;
    metadata: { annotations: Record<string, string> };
  };
  // kubeadm's ChecksumForConfigMap: sha256 over the data values, in key order.
  const values = Object.keys(configMap.data).sort().map((key) => configMap.data[key]).join("");
  assert.equal(
    configMap.metadata.annotations["kubeadm.kubernetes.io/component-config.hash"],
    `sha256:${await sha256(values)}`,
  );
  assert.deepEqual(Object.keys(configMap.data).sort(), ["config.conf", "kubeconfig.conf"]);
  assert.match(configMap.data["config.conf"], /^mode: ""$/m);
});

// --- ConfigMap wrapper -------------------------------------------------------------------------

Deno.test("parseKubeProxyConfiguration() takes a ConfigMap's only key when it is not config.conf", () => {
  const text = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: kube-proxy}\ndata:\n" +
    "  kube-proxy.yaml: |\n" +
    "    apiVersion: kubeproxy.config.k8s.io/v1alpha1\n" +
    "    kind: KubeProxyConfiguration\n" +
    "    mode: iptables\n";
  assert.deepEqual(parseKubeProxyConfiguration(text), { mode: "iptables" });
});

Deno.test("parseKubeProxyConfiguration() names the ConfigMap key in errors inside it", () => {
  const text = "apiVersion: v1\nkind: ConfigMap\ndata:\n  config.conf: |\n" +
    "    apiVersion: kubeproxy.config.k8s.io/v1alpha1\n" +
    "    kind: KubeProxyConfiguration\n" +
    "    iptables:\n      masqueradeBit: 40\n";
  assert.throws(() => parseKubeProxyConfiguration(text, { source: "cm.yaml" }), {
    name: "ConfigError",
    message:
      "config cm.yaml (ConfigMap key config.conf): iptables.masqueradeBit is 40, must be 0-31",
  });
});

Deno.test("parseKubeProxyConfiguration() rejects a ConfigMap without the configuration", () => {
  const cases: [string, string][] = [
    [
      "apiVersion: v1\nkind: ConfigMap\n",
      'config cm.yaml: ConfigMap has no data; expected data["config.conf"] holding a ' +
      "KubeProxyConfiguration",
    ],
    [
      "apiVersion: v1\nkind: ConfigMap\ndata:\n  a: x\n  b: y\n",
      'config cm.yaml: ConfigMap has no data["config.conf"] (keys: a, b); expected the ' +
      "KubeProxyConfiguration under that key, as kubeadm writes it",
    ],
    [
      "apiVersion: v1\nkind: ConfigMap\ndata:\n  config.conf: 5\n",
      'config cm.yaml: data["config.conf"] is 5, must be a string',
    ],
  ];
  for (const [text, message] of cases) {
    assert.throws(() => parseKubeProxyConfiguration(text, { source: "cm.yaml" }), {
      name: "ConfigError",
      message,
    });
  }
});

// --- mode and sections -------------------------------------------------------------------------

Deno.test("parseKubeProxyConfiguration() maps mode nftables to nft and iptables to iptables", () => {
  assert.deepEqual(parse("mode: nftables\n"), { mode: "nft" });
  assert.deepEqual(parse("mode: iptables\n"), { mode: "iptables" });
  assert.deepEqual(parse('mode: ""\n'), {});
  assert.deepEqual(parse("mode: null\n"), {});
});

Deno.test("parseKubeProxyConfiguration() rejects the kernelspace mode clearly", () => {
  assertRejects(
    "mode: kernelspace\n",
    'config kube-proxy.yaml: mode is "kernelspace", must be "nftables", "iptables", "ipvs" or "" ' +
      "(the default, nftables): kube-nftproxy has no kernelspace mode",
  );
  assertRejects(
    "mode: nft\n",
    'config kube-proxy.yaml: mode is "nft", must be "nftables", "iptables", "ipvs" or "" ' +
      "(the default, nftables)",
  );
});

const BOTH_SECTIONS = "iptables:\n  masqueradeAll: false\n  masqueradeBit: 12\n" +
  "  syncPeriod: 10s\n  minSyncPeriod: 2s\n" +
  "nftables:\n  masqueradeAll: true\n  masqueradeBit: 20\n" +
  "  syncPeriod: 1m0s\n  minSyncPeriod: 500ms\n";

Deno.test("parseKubeProxyConfiguration() takes masqueradeAll from the nftables section in nftables mode", () => {
  assert.deepEqual(parse("mode: nftables\n" + BOTH_SECTIONS), {
    mode: "nft",
    masqueradeAll: true,
    masqueradeBit: 20,
    syncPeriodMs: 60_000,
    minSyncPeriodMs: 500,
  });
});

Deno.test("parseKubeProxyConfiguration() takes the iptables section in iptables mode", () => {
  assert.deepEqual(parse("mode: iptables\n" + BOTH_SECTIONS), {
    mode: "iptables",
    masqueradeBit: 12,
    syncPeriodMs: 10_000,
    minSyncPeriodMs: 2_000,
  });
});

Deno.test("parseKubeProxyConfiguration() reads the iptables section when mode is empty, as kube-proxy does, and says what it ignores", () => {
  const warnings: string[] = [];
  const parsed = parseKubeProxyConfiguration(HEADER + 'mode: ""\n' + BOTH_SECTIONS, {
    source: "kube-proxy.yaml",
    onWarning: (line) => warnings.push(line),
  });
  assert.deepEqual(parsed, { masqueradeBit: 12, syncPeriodMs: 10_000, minSyncPeriodMs: 2_000 });
  assert.deepEqual(warnings, [
    "config kube-proxy.yaml: ignoring nftables.masqueradeAll (true), nftables.masqueradeBit (20), " +
    'nftables.syncPeriod (60s), nftables.minSyncPeriod (500ms): mode is "", which kube-proxy ' +
    "reads as iptables, so the iptables section applies (the proxy itself runs in nft mode)",
  ]);
});

Deno.test("parseKubeProxyConfiguration() keeps kubeadm's iptables.masqueradeAll with mode empty, and is silent on default sections", () => {
  const warnings: string[] = [];
  const parsed = parseKubeProxyConfiguration(
    HEADER + 'mode: ""\niptables:\n  masqueradeAll: true\n  syncPeriod: 0s\n' +
      "nftables:\n  masqueradeAll: false\n  masqueradeBit: null\n  syncPeriod: 0s\n",
    { onWarning: (line) => warnings.push(line) },
  );
  assert.deepEqual(parsed, { masqueradeAll: true });
  assert.deepEqual(warnings, []);
});

Deno.test("parseKubeProxyConfiguration() takes the section of options.mode over the file's mode", () => {
  assert.deepEqual(parse("mode: nftables\n" + BOTH_SECTIONS, "iptables"), {
    mode: "nft",
    masqueradeBit: 12,
    syncPeriodMs: 10_000,
    minSyncPeriodMs: 2_000,
  });
});

Deno.test("parseKubeProxyConfiguration() treats Go zero values as unset, as upstream defaulting does", () => {
  const zeros = 'hostnameOverride: ""\nbindAddress: ""\nhealthzBindAddress: ""\n' +
    'metricsBindAddress: ""\nclusterCIDR: ""\ndetectLocalMode: ""\nnodePortAddresses: []\n' +
    "iptables:\n  masqueradeAll: false\n  masqueradeBit: null\n  syncPeriod: 0s\n" +
    "  minSyncPeriod: 0s\n" +
    "nftables:\n  masqueradeAll: false\n  masqueradeBit: null\n  syncPeriod: 0s\n" +
    "  minSyncPeriod: 0s\n" +
    'clientConnection:\n  kubeconfig: ""\nlogging:\n  verbosity: 0\n';
  assert.deepEqual(parse(zeros), {});
  assert.deepEqual(parse("nftables: null\ndetectLocal: null\n"), {});
});

Deno.test("parseKubeProxyConfiguration() keeps masqueradeBit 0, which is a real bit", () => {
  assert.deepEqual(parse("nftables:\n  masqueradeBit: 0\n", "nft"), { masqueradeBit: 0 });
});

Deno.test("parseKubeProxyConfiguration() reads Go durations into milliseconds", () => {
  assert.deepEqual(parse("iptables:\n  syncPeriod: 1h2m3.5s\n  minSyncPeriod: 1500us\n"), {
    syncPeriodMs: 3_723_500,
    minSyncPeriodMs: 1.5,
  });
});

Deno.test("parseKubeProxyConfiguration() reads YAML 1.1 booleans the way Go's YAML reader does", () => {
  assert.deepEqual(parse("iptables:\n  masqueradeAll: yes\n"), { masqueradeAll: true });
  assert.deepEqual(parse("iptables:\n  masqueradeAll: off\n"), {});
});

Deno.test("parseKubeProxyConfiguration() rejects a masquerade bit outside 0-31", () => {
  assertRejects(
    "iptables:\n  masqueradeBit: 40\n",
    "config kube-proxy.yaml: iptables.masqueradeBit is 40, must be 0-31",
  );
  assertRejects(
    "nftables:\n  masqueradeBit: -1\n",
    "config kube-proxy.yaml: nftables.masqueradeBit is -1, must be 0-31",
    "nft",
  );
  assertRejects(
    "nftables:\n  masqueradeBit: 1.5\n",
    "config kube-proxy.yaml: nftables.masqueradeBit is 1.5, must be a whole number",
    "nft",
  );
  assertRejects(
    'nftables:\n  masqueradeBit: "14"\n',
    'config kube-proxy.yaml: nftables.masqueradeBit is "14", must be a whole number',
  );
});

Deno.test("parseKubeProxyConfiguration() validates iptables.masqueradeBit in every mode, nftables' only in nft mode", () => {
  assertRejects(
    "mode: nftables\niptables:\n  masqueradeBit: 32\n",
    "config kube-proxy.yaml: iptables.masqueradeBit is 32, must be 0-31",
  );
  assert.deepEqual(parse("mode: iptables\nnftables:\n  masqueradeBit: 32\n"), {
    mode: "iptables",
  });
});

Deno.test("parseKubeProxyConfiguration() rejects durations kube-proxy rejects", () => {
  const rule = "must be a duration such as 30s, 1m0s or 500ms";
  assertRejects(
    'nftables:\n  syncPeriod: "30"\n',
    `config kube-proxy.yaml: nftables.syncPeriod is "30", ${rule} ` +
      '(time: missing unit in duration "30")',
  );
  assertRejects(
    "nftables:\n  syncPeriod: 30\n",
    `config kube-proxy.yaml: nftables.syncPeriod is 30, ${rule} (quoted)`,
  );
  assertRejects(
    "nftables:\n  syncPeriod: null\n",
    `config kube-proxy.yaml: nftables.syncPeriod is null, ${rule} (time: invalid duration "")`,
  );
  assertRejects(
    'nftables:\n  minSyncPeriod: ""\n',
    `config kube-proxy.yaml: nftables.minSyncPeriod is "", ${rule} (time: invalid duration "")`,
  );
  // The section not in use is still decoded, so its syntax must be right.
  assertRejects(
    "iptables:\n  syncPeriod: 1d\n",
    `config kube-proxy.yaml: iptables.syncPeriod is "1d", ${rule} ` +
      '(time: unknown unit "d" in duration "1d")',
  );
});

Deno.test("parseKubeProxyConfiguration() rejects negative sync periods in the section in use", () => {
  assertRejects(
    "iptables:\n  syncPeriod: -1s\n",
    'config kube-proxy.yaml: iptables.syncPeriod is "-1s", must be greater than 0',
  );
  assertRejects(
    "nftables:\n  minSyncPeriod: -1s\n",
    'config kube-proxy.yaml: nftables.minSyncPeriod is "-1s", must be greater than or equal to 0',
    "nft",
  );
  assert.deepEqual(parse("nftables:\n  syncPeriod: -1s\n"), {});
});

// --- strict decoding ---------------------------------------------------------------------------

Deno.test("parseKubeProxyConfiguration() loads a file with unknown fields, warning once with upstream's words and naming each", () => {
  const { result, warnings } = parseWarning(
    "udpIdleTimeout: 250ms\nresourceContainer: /kube-proxy\nmetadata:\n  name: kube-proxy\n" +
      "Mode: iptables\nmasqueradeAll: true\n" +
      "nftables:\n  masqueradeAl: true\n  syncPeriod: 45s\ndetectLocal:\n  bridge: cbr0\n" +
      "clientConnection:\n  kubeConfig: /x\nconntrack:\n  maxPerCpu: 5\n" +
      "logging:\n  sanitization: true\n  options:\n    text:\n      color: true\n" +
      "mode: nftables\n",
  );
  // The unknown fields have no effect (`Mode` is not `mode`, a top-level masqueradeAll is not
  // the section's), and the known ones still apply.
  assert.deepEqual(result, { mode: "nft", syncPeriodMs: 45_000 });
  assert.deepEqual(warnings, [
    "config kube-proxy.yaml: using lenient decoding as strict decoding failed: " +
    'unknown field "udpIdleTimeout", unknown field "resourceContainer", ' +
    'unknown field "metadata", unknown field "Mode", unknown field "masqueradeAll", ' +
    'unknown field "detectLocal.bridge", unknown field "nftables.masqueradeAl", ' +
    'unknown field "clientConnection.kubeConfig", unknown field "conntrack.maxPerCpu", ' +
    'unknown field "logging.sanitization", unknown field "logging.options.text.color"',
  ]);
});

Deno.test("parseKubeProxyConfiguration() takes the last of duplicate keys, warning once", () => {
  const { result, warnings } = parseWarning(
    "mode: iptables\nclusterCIDR: 10.244.0.0/16\nmode: nftables\n",
  );
  assert.deepEqual(result, { mode: "nft", clusterCIDRs: ["10.244.0.0/16"] });
  assert.deepEqual(warnings, [
    "config kube-proxy.yaml: using lenient decoding as strict decoding failed: " +
    'duplicate field "mode" (line 5)',
  ]);
});

Deno.test("parseKubeProxyConfiguration() loads a public install guide's file: removed fields, an ipvs block, a duplicate key", () => {
  const { result, warnings } = parseWarning(
    "bindAddress: 0.0.0.0\nclusterCIDR: 10.244.0.0/16\nudpIdleTimeout: 250ms\n" +
      "resourceContainer: /kube-proxy\nipvs:\n  minSyncPeriod: 0s\n  scheduler: rr\n" +
      "  syncPeriod: 30s\nmode: iptables\nmode: nftables\n",
  );
  assert.deepEqual(result, { mode: "nft", clusterCIDRs: ["10.244.0.0/16"] });
  // One line for what lenient decoding skipped, one for the ipvs block a non-ipvs mode ignores.
  assert.deepEqual(warnings, [
    'config kube-proxy.yaml: ignoring ipvs.syncPeriod (30s), ipvs.scheduler (rr): mode is "nftables", ' +
    "so the ipvs section does not apply",
    "config kube-proxy.yaml: using lenient decoding as strict decoding failed: " +
    'duplicate field "mode" (line 12), unknown field "udpIdleTimeout", unknown field "resourceContainer"',
  ]);
});

Deno.test("parseKubeProxyConfiguration() still fails on a wrong type or a bad value beside unknown fields", () => {
  assertRejects(
    "udpIdleTimeout: 250ms\nnftables:\n  masqueradeAll: maybe\n",
    'config kube-proxy.yaml: nftables.masqueradeAll is "maybe", must be true or false',
  );
  assertRejects(
    "mode: a\nmode: b\n",
    'config kube-proxy.yaml: mode is "b", must be "nftables", "iptables", "ipvs" or "" ' +
      "(the default, nftables)",
  );
  assertRejects(
    "udpIdleTimeout: 250ms\nconntrack:\n  min: lots\n",
    'config kube-proxy.yaml: conntrack.min is "lots", must be a whole number',
  );
});

Deno.test("parseKubeProxyConfiguration() reads every other upstream field, listing once those without effect", () => {
  const body = "featureGates:\n  SomeGate: true\n" +
    "clientConnection:\n  acceptContentTypes: application/json\n  burst: 20\n" +
    "  contentType: application/vnd.kubernetes.protobuf\n  qps: 10.5\n" +
    "logging:\n  format: json\n  flushFrequency: 5s\n  vmodule: []\n" +
    '  options:\n    json:\n      infoBufferSize: "0"\n' +
    'bindAddressHardFail: true\nenableProfiling: true\nshowHiddenMetricsForVersion: "1.30"\n' +
    "iptables:\n  localhostNodePorts: true\n  snatNodeInternalIP: false\n" +
    "ipvs:\n  scheduler: rr\n  excludeCIDRs: [10.0.0.0/8]\n  strictARP: true\n" +
    "  syncPeriod: 30s\n  minSyncPeriod: 0s\n  tcpTimeout: 0s\n  tcpFinTimeout: 0s\n" +
    "  udpTimeout: 0s\n" +
    "winkernel:\n  networkName: x\n  sourceVip: 10.0.0.1\n  enableDSR: true\n" +
    "  rootHnsEndpointName: y\n  forwardHealthCheckVip: true\n" +
    "oomScoreAdj: -998\n" +
    "conntrack:\n  maxPerCore: 32768\n  min: 131072\n  tcpBeLiberal: true\n" +
    "  tcpCloseWaitTimeout: 1h0m0s\n  tcpEstablishedTimeout: 24h0m0s\n" +
    "  udpStreamTimeout: 0s\n  udpTimeout: 0s\n" +
    'configSyncPeriod: 15m0s\nportRange: "30000-32767"\nwindowsRunAsService: true\n';
  const { result, warnings } = parseWarning(body);
  assert.deepEqual(result, {
    kubeApiQps: 10.5,
    kubeApiBurst: 20,
    loggingFormat: "json",
    bindAddressHardFail: true,
    oomScoreAdj: -998,
    conntrackMaxPerCore: 32768,
    conntrackMin: 131072,
    conntrackTCPBeLiberal: true,
    conntrackTCPCloseWaitTimeoutMs: 3600_000,
    conntrackTCPEstablishedTimeoutMs: 86_400_000,
  });
  assert.deepEqual(warnings, [
    "config kube-proxy.yaml: ignoring ipvs.syncPeriod (30s), ipvs.scheduler (rr), " +
    'ipvs.strictARP (true), ipvs.excludeCIDRs (10.0.0.0/8): mode is "", so the ipvs section ' +
    "does not apply",
    "config kube-proxy.yaml: ignoring fields that have no effect in kube-nftproxy: " +
    "featureGates.SomeGate (true): kube-nftproxy has no feature gates (it behaves as upstream " +
    "with its gates at their defaults); " +
    "clientConnection.contentType (application/vnd.kubernetes.protobuf): the API server is " +
    "always read as JSON; " +
    "enableProfiling (true): no /debug/pprof here (it is Go's profiler); " +
    "showHiddenMetricsForVersion (1.30): kube-nftproxy hides no metrics; " +
    "configSyncPeriod (15m0s): the watches need no periodic resync (syncPeriod forces full " +
    "syncs); " +
    "portRange (30000-32767): it served the userspace mode, which upstream removed; " +
    "winkernel.networkName (x): Windows only; winkernel.sourceVip (10.0.0.1): Windows only; " +
    "winkernel.enableDSR (true): Windows only; winkernel.rootHnsEndpointName (y): Windows only; " +
    "winkernel.forwardHealthCheckVip (true): Windows only; windowsRunAsService (true): Windows " +
    "only; iptables.localhostNodePorts (true): node ports are never served on 127.0.0.1 here " +
    "(no route_localnet)",
  ]);
});

Deno.test("parseKubeProxyConfiguration() is silent on upstream fields left at their zero values", async () => {
  const configMap = load(await Deno.readTextFile(KUBEADM_CONFIG_MAP)) as {
    data: Record<string, string>;
  };
  const warnings: string[] = [];
  parseKubeProxyConfiguration(configMap.data["config.conf"], {
    onWarning: (line) => warnings.push(line),
  });
  assert.deepEqual(warnings, []);
});

Deno.test("parseKubeProxyConfiguration() type-checks the fields it ignores", () => {
  assertRejects(
    "featureGates:\n  SomeGate: sure\n",
    'config kube-proxy.yaml: featureGates.SomeGate is "sure", must be true or false',
  );
  assertRejects(
    "clientConnection:\n  qps: fast\n",
    'config kube-proxy.yaml: clientConnection.qps is "fast", must be a number',
  );
  assertRejects(
    "configSyncPeriod: -1m\n",
    'config kube-proxy.yaml: configSyncPeriod is "-1m", must be greater than 0',
  );
  assertRejects(
    "logging:\n  flushFrequency: often\n",
    'config kube-proxy.yaml: logging.flushFrequency is "often", must be a duration such as ' +
      '30s, 1m0s or 500ms (time: invalid duration "often")',
  );
  assertRejects(
    "logging:\n  format: xml\n",
    'config kube-proxy.yaml: logging.format is "xml", must be "text" or "json"',
  );
  assertRejects(
    "oomScoreAdj: -1001\n",
    "config kube-proxy.yaml: oomScoreAdj is -1001, must be in the range [-1000, 1000]",
  );
});

Deno.test("parseKubeProxyConfiguration() reads conntrack: null pointers are defaults, 0 leaves the kernel alone", () => {
  assert.deepEqual(
    parse(
      "conntrack:\n  maxPerCore: null\n  min: null\n  tcpBeLiberal: false\n" +
        "  tcpCloseWaitTimeout: null\n  tcpEstablishedTimeout: null\n" +
        "  udpStreamTimeout: 0s\n  udpTimeout: 0s\n",
    ),
    {},
  );
  assert.deepEqual(parse("conntrack:\n  maxPerCore: 0\n  tcpEstablishedTimeout: 0s\n"), {
    conntrackMaxPerCore: 0,
    conntrackTCPEstablishedTimeoutMs: 0,
  });
  assertRejects(
    "conntrack:\n  maxPerCore: -1\n",
    "config kube-proxy.yaml: conntrack.maxPerCore is -1, must be a whole number from 0 to 2147483647",
  );
  assertRejects(
    "conntrack:\n  tcpEstablishedTimeout: 1500ms\n",
    'config kube-proxy.yaml: conntrack.tcpEstablishedTimeout is "1500ms", must be whole seconds (the kernel counts seconds)',
  );
});

Deno.test("parseKubeProxyConfiguration() rejects wrong types with the field's name", () => {
  assertRejects(
    'nftables:\n  masqueradeAll: "maybe"\n',
    'config kube-proxy.yaml: nftables.masqueradeAll is "maybe", must be true or false',
  );
  assertRejects(
    "hostnameOverride: 12\n",
    "config kube-proxy.yaml: hostnameOverride is 12, must be a string",
  );
  assertRejects("nftables: 5\n", "config kube-proxy.yaml: nftables is 5, must be a mapping");
  assertRejects(
    "conntrack: [1]\n",
    "config kube-proxy.yaml: conntrack is [1], must be a mapping",
  );
  assertRejects(
    "nodePortAddresses: 10.0.0.0/8\n",
    'config kube-proxy.yaml: nodePortAddresses is "10.0.0.0/8", must be a list of strings',
  );
  assertRejects(
    "logging:\n  verbosity: -1\n",
    "config kube-proxy.yaml: logging.verbosity is -1, must be a whole number >= 0",
  );
});

Deno.test("parseKubeProxyConfiguration() rejects a wrong apiVersion or kind", () => {
  assert.throws(
    () => parseKubeProxyConfiguration("apiVersion: v1\nkind: KubeProxyConfiguration\n"),
    {
      name: "ConfigError",
      message: 'config: apiVersion is "v1", must be kubeproxy.config.k8s.io/v1alpha1',
    },
  );
  assert.throws(() => parseKubeProxyConfiguration("kind: KubeProxyConfiguration\n"), {
    name: "ConfigError",
    message: "config: apiVersion is missing, must be kubeproxy.config.k8s.io/v1alpha1",
  });
  assert.throws(
    () =>
      parseKubeProxyConfiguration(
        "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeletConfiguration\n",
      ),
    {
      name: "ConfigError",
      message: 'config: kind is "KubeletConfiguration", must be KubeProxyConfiguration ' +
        '(or a ConfigMap holding one under data["config.conf"])',
    },
  );
});

Deno.test("parseKubeProxyConfiguration() rejects text that is not one YAML mapping", () => {
  const cases: [string, string][] = [
    ["", "config k.yaml: must be a KubeProxyConfiguration (a YAML mapping), got an empty document"],
    ["- a\n", "config k.yaml: must be a KubeProxyConfiguration (a YAML mapping), got a list"],
    [
      "hello",
      'config k.yaml: must be a KubeProxyConfiguration (a YAML mapping), got string "hello"',
    ],
    ["mode: [\n", "config k.yaml: not valid YAML: deficient indentation (2:1)"],
    [
      HEADER + "---\n" + HEADER,
      "config k.yaml: not valid YAML: expected a single document in the stream, but found more",
    ],
  ];
  for (const [text, message] of cases) {
    assert.throws(() => parseKubeProxyConfiguration(text, { source: "k.yaml" }), {
      name: "ConfigError",
      message,
    });
  }
});

// --- addresses and local detection -------------------------------------------------------------

Deno.test("parseKubeProxyConfiguration() splits clusterCIDR into one CIDR per family", () => {
  assert.deepEqual(parse("clusterCIDR: 10.244.0.0/16\n"), { clusterCIDRs: ["10.244.0.0/16"] });
  assert.deepEqual(parse("clusterCIDR: 10.244.0.0/16,fd00:10:244::/56\n"), {
    clusterCIDRs: ["10.244.0.0/16", "fd00:10:244::/56"],
  });
});

Deno.test("parseKubeProxyConfiguration() rejects a clusterCIDR that is not one CIDR per family", () => {
  const rule = "must be a CIDR or a comma-separated IPv4,IPv6 pair of CIDRs";
  const cases: [string, string][] = [
    ["10.0.0.0/8,192.168.0.0/16", "(at most one per IP family)"],
    ["10.0.0.0/8,fd00::/48,fd01::/48", "(at most one per IP family)"],
    ["10.0.0.0/33", '("10.0.0.0/33" is not a CIDR)'],
    ["10.0.0.0", '("10.0.0.0" is not a CIDR)'],
    ["10.0.0.0/8,", '("" is not a CIDR)'],
    ["10.0.0.0/8, fd00::/48", '(" fd00::/48" is not a CIDR)'],
  ];
  for (const [value, reason] of cases) {
    assertRejects(
      `clusterCIDR: "${value}"\n`,
      `config kube-proxy.yaml: clusterCIDR is "${value}", ${rule} ${reason}`,
    );
  }
});

Deno.test("parseKubeProxyConfiguration() reads nodePortAddresses as CIDRs or primary", () => {
  assert.deepEqual(parse("nodePortAddresses: [10.0.0.0/8, fd00::/64]\n"), {
    nodePortAddresses: ["10.0.0.0/8", "fd00::/64"],
  });
  assert.deepEqual(parse("nodePortAddresses: [primary]\n"), { nodePortAddresses: ["primary"] });
  assertRejects(
    "nodePortAddresses: [primary, 10.0.0.0/8]\n",
    'config kube-proxy.yaml: nodePortAddresses[0] is "primary", must be the only entry ' +
      '("primary" cannot be combined with CIDRs)',
  );
  assertRejects(
    "nodePortAddresses: [10.0.0.0/8, all]\n",
    'config kube-proxy.yaml: nodePortAddresses[1] is "all", must be a CIDR or "primary"',
  );
});

Deno.test("parseKubeProxyConfiguration() reads detectLocalMode and detectLocal", () => {
  assert.deepEqual(
    parse("detectLocalMode: BridgeInterface\ndetectLocal:\n  bridgeInterface: cbr0\n"),
    { detectLocalMode: "BridgeInterface", bridgeInterface: "cbr0" },
  );
  assert.deepEqual(
    parse("detectLocalMode: InterfaceNamePrefix\ndetectLocal:\n  interfaceNamePrefix: veth\n"),
    { detectLocalMode: "InterfaceNamePrefix", interfaceNamePrefix: "veth" },
  );
  assert.deepEqual(parse("detectLocalMode: NodeCIDR\n"), { detectLocalMode: "NodeCIDR" });
  for (const value of ["None", "clustercidr"]) {
    assertRejects(
      `detectLocalMode: ${value}\n`,
      `config kube-proxy.yaml: detectLocalMode is "${value}", must be one of ClusterCIDR, ` +
        'NodeCIDR, BridgeInterface, InterfaceNamePrefix or ""',
    );
  }
});

Deno.test("parseKubeProxyConfiguration() trims and lowercases hostnameOverride like kube-proxy", () => {
  assert.deepEqual(parse('hostnameOverride: " Node-1 "\n'), { hostname: "node-1" });
  assert.deepEqual(parse('hostnameOverride: "  "\n'), {});
});

Deno.test("parseKubeProxyConfiguration() keeps bindAddress only when it names a node IP", () => {
  assert.deepEqual(parse("bindAddress: 0.0.0.0\n"), {});
  assert.deepEqual(parse("bindAddress: 192.168.1.10\n"), { bindAddress: "192.168.1.10" });
  assertRejects(
    "bindAddress: 192.168.1.10:80\n",
    'config kube-proxy.yaml: bindAddress is "192.168.1.10:80", must be an IP address',
  );
});

Deno.test("parseKubeProxyConfiguration() defaults the servers to IPv6 addresses when bindAddress is IPv6", () => {
  assert.deepEqual(parse('bindAddress: "::"\n'), {
    healthzBindAddress: "[::]:10256",
    metricsBindAddress: "[::1]:10249",
  });
  assert.deepEqual(parse("bindAddress: fd00::10\nmetricsBindAddress: 0.0.0.0:9000\n"), {
    bindAddress: "fd00::10",
    healthzBindAddress: "[::]:10256",
    metricsBindAddress: "0.0.0.0:9000",
  });
});

Deno.test("parseKubeProxyConfiguration() appends the default port to a bare server IP", () => {
  assert.deepEqual(parse('healthzBindAddress: 0.0.0.0\nmetricsBindAddress: "::"\n'), {
    healthzBindAddress: "0.0.0.0:10256",
    metricsBindAddress: "[::]:10249",
  });
  assertRejects(
    "healthzBindAddress: localhost:10256\n",
    'config kube-proxy.yaml: healthzBindAddress is "localhost:10256", must be IP:port with a ' +
      "port 1-65535, e.g. 0.0.0.0:10256",
  );
  assertRejects(
    "metricsBindAddress: 127.0.0.1:0\n",
    'config kube-proxy.yaml: metricsBindAddress is "127.0.0.1:0", must be IP:port with a ' +
      "port 1-65535, e.g. 0.0.0.0:10256",
  );
});

Deno.test("parseKubeProxyConfiguration() reads clientConnection.kubeconfig and logging.verbosity", () => {
  assert.deepEqual(
    parse("clientConnection:\n  kubeconfig: /etc/kp.conf\nlogging:\n  verbosity: 4\n"),
    { kubeconfig: "/etc/kp.conf", verbosity: 4 },
  );
});

Deno.test("parseKubeProxyConfiguration() names no file when given no source", () => {
  assert.throws(
    () => parseKubeProxyConfiguration(HEADER + "iptables:\n  masqueradeBit: 40\n"),
    { name: "ConfigError", message: "config: iptables.masqueradeBit is 40, must be 0-31" },
  );
});

// --- writing -----------------------------------------------------------------------------------

const CUSTOM: Config = {
  mode: "iptables",
  hostname: "node-7",
  clusterCIDRs: ["10.244.0.0/16", "fd00:10:244::/56"],
  detectLocalMode: "InterfaceNamePrefix",
  bridgeInterface: "cbr0",
  interfaceNamePrefix: "veth",
  nodePortAddresses: ["10.0.0.0/8", "fd00::/64"],
  masqueradeAll: true,
  masqueradeBit: 3,
  minSyncPeriodMs: 250,
  syncPeriodMs: 3_723_500,
  bindAddress: "10.0.0.7",
  healthzBindAddress: "10.0.0.7:10256",
  metricsBindAddress: "[::1]:9100",
  bindAddressHardFail: true,
  oomScoreAdj: -500,
  tableName: DEFAULT_CONFIG.tableName,
  iptablesBackend: "auto",
  kubeconfig: "/etc/kubernetes/kube-proxy.conf",
  master: "",
  kubeApiQps: 7.5,
  kubeApiBurst: 20,
  fromFile: "",
  maxClusterFileBytes: DEFAULT_CONFIG.maxClusterFileBytes,
  maxListBytes: DEFAULT_CONFIG.maxListBytes,
  maxWatchEventBytes: DEFAULT_CONFIG.maxWatchEventBytes,
  verbosity: 2,
  loggingFormat: "json",
  scheduler: DEFAULT_CONFIG.scheduler,
  conntrackMaxPerCore: 0,
  conntrackMin: 4096,
  conntrackTCPEstablishedTimeoutMs: 2 * 3600_000,
  conntrackTCPCloseWaitTimeoutMs: 0,
  conntrackTCPBeLiberal: true,
  conntrackUDPTimeoutMs: 30_000,
  conntrackUDPStreamTimeoutMs: 120_000,
};

/** Writes `config`, reads it back over the defaults. */
function roundTrip(config: Config): Config {
  const parsed = parseKubeProxyConfiguration(toKubeProxyConfiguration(config));
  return { ...DEFAULT_CONFIG, ...parsed };
}

Deno.test("toKubeProxyConfiguration() output reads back to the same config", () => {
  assert.deepEqual(roundTrip(CUSTOM), CUSTOM);
  const nft: Config = { ...CUSTOM, mode: "nft", detectLocalMode: "NodeCIDR" };
  assert.deepEqual(roundTrip(nft), nft);
  const defaults: Config = { ...DEFAULT_CONFIG, hostname: "node-1" };
  assert.deepEqual(roundTrip(defaults), defaults);
  const primary: Config = { ...defaults, nodePortAddresses: ["primary"], masqueradeBit: 0 };
  assert.deepEqual(roundTrip(primary), primary);
});

Deno.test("toKubeProxyConfiguration() writes upstream's schema with both backend sections", () => {
  const written = load(toKubeProxyConfiguration(CUSTOM)) as Record<string, unknown>;
  const section = {
    masqueradeAll: true,
    masqueradeBit: 3,
    minSyncPeriod: "250ms",
    syncPeriod: "1h2m3.5s",
  };
  assert.deepEqual(written, {
    apiVersion: "kubeproxy.config.k8s.io/v1alpha1",
    kind: "KubeProxyConfiguration",
    bindAddress: "10.0.0.7",
    bindAddressHardFail: true,
    clientConnection: { burst: 20, kubeconfig: "/etc/kubernetes/kube-proxy.conf", qps: 7.5 },
    clusterCIDR: "10.244.0.0/16,fd00:10:244::/56",
    conntrack: {
      maxPerCore: 0,
      min: 4096,
      tcpBeLiberal: true,
      tcpCloseWaitTimeout: "0s",
      tcpEstablishedTimeout: "2h0m0s",
      udpStreamTimeout: "2m0s",
      udpTimeout: "30s",
    },
    detectLocal: { bridgeInterface: "cbr0", interfaceNamePrefix: "veth" },
    detectLocalMode: "InterfaceNamePrefix",
    healthzBindAddress: "10.0.0.7:10256",
    hostnameOverride: "node-7",
    iptables: section,
    logging: { format: "json", verbosity: 2 },
    metricsBindAddress: "[::1]:9100",
    mode: "iptables",
    nftables: section,
    nodePortAddresses: ["10.0.0.0/8", "fd00::/64"],
    oomScoreAdj: -500,
  });
});

Deno.test("toKubeProxyConfiguration() writes hostnameOverride from options when given", () => {
  const written = load(toKubeProxyConfiguration(CUSTOM, { hostnameOverride: "" })) as {
    hostnameOverride: string;
  };
  assert.equal(written.hostnameOverride, "");
});

Deno.test("toKubeProxyConfiguration() writes detectLocalMode None as ClusterCIDR without CIDRs", () => {
  const written = load(toKubeProxyConfiguration({ ...CUSTOM, detectLocalMode: "None" })) as {
    detectLocalMode: string;
    clusterCIDR: string;
  };
  assert.equal(written.detectLocalMode, "ClusterCIDR");
  assert.equal(written.clusterCIDR, "");
});

Deno.test("toKubeProxyConfiguration() notes in comments what the format cannot hold", () => {
  const text = toKubeProxyConfiguration({
    ...CUSTOM,
    tableName: "edge",
    master: "https://10.0.0.1:6443",
    fromFile: "cluster.yaml",
    maxListBytes: 1024,
    minSyncPeriodMs: 0,
    healthzBindAddress: "",
  });
  const comments = text.split("\n").filter((line) => line.startsWith("#"));
  assert.deepEqual(comments, [
    "# Written by kube-nftproxy --write-config-to; kube-proxy reads it as well.",
    "# Not expressible here, pass as flags: --table-name=edge --master=https://10.0.0.1:6443 " +
    "--from-file=cluster.yaml --max-list-bytes=1024",
    "# minSyncPeriod 0 is read as the default (1s); pass --*-min-sync-period=0.",
    '# The healthz server is disabled; "" is read as the default.',
  ]);
});
