import assert from "node:assert/strict";
import { type Config, DEFAULT_CONFIG } from "./config.ts";
import { ConfigError } from "./config_error.ts";
import {
  checkClusterCIDRs,
  checkHostPort,
  checkNodePortAddresses,
  checkTableName,
  describeField,
  normalizeHostname,
  parseUpstreamDetectLocalMode,
  parseUpstreamProxyMode,
  validateConfig,
} from "./validation.ts";

Deno.test("checkHostPort() wants an IP and a port 1-65535, or nothing", () => {
  for (const good of ["", "0.0.0.0:10256", "[::]:1", "127.0.0.1:65535"]) {
    assert.equal(checkHostPort(good), undefined, good);
  }
  for (const bad of [":10256", "0.0.0.0:0", "0.0.0.0:65536", "0.0.0.0:http", "host:80", "::1"]) {
    assert.equal(checkHostPort(bad), "must be IP:port with a port 1-65535, e.g. 0.0.0.0:10256");
  }
});

Deno.test("checkClusterCIDRs() allows no CIDR, one, or one per family", () => {
  assert.equal(checkClusterCIDRs([]), undefined);
  assert.equal(checkClusterCIDRs(["fd00::/48"]), undefined);
  assert.equal(checkClusterCIDRs(["fd00::/48", "10.0.0.0/8"]), undefined);
  assert.match(checkClusterCIDRs(["fd00::/48", "fd01::/48"]) ?? "", /at most one per IP family/);
});

Deno.test("checkNodePortAddresses() allows CIDRs or primary alone", () => {
  assert.equal(checkNodePortAddresses([]), undefined);
  assert.equal(checkNodePortAddresses(["primary"]), undefined);
  assert.equal(checkNodePortAddresses(["10.0.0.0/8", "::/0"]), undefined);
  assert.deepEqual(checkNodePortAddresses(["10.0.0.0/8", "primary"]), {
    index: 1,
    rule: 'must be the only entry ("primary" cannot be combined with CIDRs)',
  });
});

Deno.test("checkTableName() allows nft identifiers that need no quoting", () => {
  assert.equal(checkTableName("kube-nftproxy"), undefined);
  assert.equal(checkTableName("k8s_proxy.v2"), undefined);
  for (const bad of ["", "1proxy", "kube proxy", "a/b", "x".repeat(256)]) {
    assert.notEqual(checkTableName(bad), undefined, bad);
  }
});

Deno.test("normalizeHostname() trims and lowercases", () => {
  assert.equal(normalizeHostname("\tWorker-1.Example \n"), "worker-1.example");
});

Deno.test("parseUpstreamProxyMode() and parseUpstreamDetectLocalMode() read upstream names", () => {
  assert.equal(parseUpstreamProxyMode("nftables", "f"), "nft");
  assert.equal(parseUpstreamProxyMode("iptables", "f"), "iptables");
  assert.equal(parseUpstreamProxyMode("", "f"), undefined);
  assert.throws(() => parseUpstreamProxyMode("userspace", "f"), ConfigError);
  assert.equal(parseUpstreamDetectLocalMode("ClusterCIDR", "f"), "ClusterCIDR");
  assert.equal(parseUpstreamDetectLocalMode("", "f"), undefined);
  assert.throws(() => parseUpstreamDetectLocalMode("None", "f"), ConfigError);
});

const GOOD: Config = { ...DEFAULT_CONFIG, hostname: "node-1" };

Deno.test("validateConfig() passes the defaults with a host name, and None local detection", () => {
  assert.equal(validateConfig(GOOD), GOOD);
  const none: Config = { ...GOOD, detectLocalMode: "None" };
  assert.equal(validateConfig(none), none);
});

Deno.test("validateConfig() names fields by their upstream names unless told otherwise", () => {
  const cases: [Partial<Config>, string][] = [
    [{ masqueradeBit: 32 }, "nftables.masqueradeBit/--iptables-masquerade-bit is 32, must be 0-31"],
    [
      { hostname: "" },
      'hostnameOverride/--hostname-override is "", must be set (no ' +
      "--hostname-override, hostnameOverride or NODE_NAME)",
    ],
    [
      { mode: "ipvs" as Config["mode"] },
      'mode/--mode/--proxy-mode is "ipvs", must be nft or iptables',
    ],
    [
      { detectLocalMode: "Foo" as Config["detectLocalMode"] },
      'detectLocalMode/--detect-local-mode is "Foo", must be one of ClusterCIDR, NodeCIDR, ' +
      "BridgeInterface, InterfaceNamePrefix or None",
    ],
    [
      { syncPeriodMs: 0 },
      'nftables.syncPeriod/--nftables-sync-period is "0s", must be greater than 0',
    ],
    [
      { mode: "iptables", minSyncPeriodMs: -1 },
      'iptables.minSyncPeriod/--iptables-min-sync-period is "-1ms", must be greater than or ' +
      "equal to 0",
    ],
    [{ bindAddress: "x" }, 'bindAddress/--bind-address is "x", must be an IP address'],
    [
      { tableName: "" },
      '--table-name is "", must start with a letter and hold only letters, ' +
      "digits, _, - and . (at most 255)",
    ],
    [{ verbosity: 1.5 }, "logging.verbosity/-v is 1.5, must be a whole number >= 0"],
    [
      { clusterCIDRs: ["bogus"] },
      'clusterCIDR/--cluster-cidr is "bogus", must be a CIDR or a comma-separated IPv4,IPv6 ' +
      'pair of CIDRs ("bogus" is not a CIDR)',
    ],
  ];
  for (const [overrides, message] of cases) {
    assert.throws(() => validateConfig({ ...GOOD, ...overrides }), {
      name: "ConfigError",
      message,
    });
  }
  assert.throws(
    () => validateConfig({ ...GOOD, masqueradeBit: 32 }, { describe: (key) => `my ${key}` }),
    { name: "ConfigError", message: "my masqueradeBit is 32, must be 0-31" },
  );
});

Deno.test("describeField() names sync periods after the mode's section", () => {
  assert.equal(describeField("syncPeriodMs", "nft"), "nftables.syncPeriod/--nftables-sync-period");
  assert.equal(
    describeField("minSyncPeriodMs", "iptables"),
    "iptables.minSyncPeriod/--iptables-min-sync-period",
  );
});
