import assert from "node:assert/strict";
import { ConfigError } from "./config_error.ts";
import { type CommandLine, parseCommandLine } from "./flags.ts";
import { mapIpvsScheduler } from "./ipvs_mode.ts";

const HEADER = "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\n";

/** Parses `argv` with a kube-proxy.yaml made of HEADER plus `file` (when given). */
function parse(argv: string[], file?: string): Promise<CommandLine> {
  return parseCommandLine(argv, {
    readFile: (path) =>
      file !== undefined && path === "kube-proxy.yaml"
        ? Promise.resolve(HEADER + file)
        : Promise.reject(new Deno.errors.NotFound(path)),
    env: () => undefined,
    hostname: () => "worker-1",
  });
}

const FILE = ["--config", "kube-proxy.yaml"];

/** The one warning about ipvs mode among `warnings`. */
function ipvsWarning(warnings: readonly string[]): string {
  const lines = warnings.filter((line) => line.includes(": mode ipvs runs "));
  assert.equal(lines.length, 1, `expected one ipvs warning, got ${JSON.stringify(warnings)}`);
  return lines[0];
}

/** The settings the warning names after `ignored (no nftables meaning): `. */
function ignoredNames(warning: string): string[] {
  const list = warning.split("ignored (no nftables meaning): ")[1];
  return list === "none" ? [] : list.split(", ").map((item) => item.replace(/ \(.*\)$/, ""));
}

Deno.test("parseCommandLine() runs mode ipvs as nft mode with the ipvs section's sync periods", async () => {
  const { config, warnings } = await parse(
    FILE,
    "mode: ipvs\nipvs:\n  syncPeriod: 1m0s\n  minSyncPeriod: 2s\n" +
      "nftables:\n  syncPeriod: 5m0s\niptables:\n  masqueradeAll: true\n",
  );
  assert.equal(config.mode, "nft");
  assert.equal(config.syncPeriodMs, 60_000);
  assert.equal(config.minSyncPeriodMs, 2_000);
  // ipvs mode masquerades as iptables: says; nftables: is another mode's section.
  assert.equal(config.masqueradeAll, true);
  assert.equal(config.scheduler, "round-robin", "IPVS's default scheduler is rr");
  const warning = ipvsWarning(warnings);
  assert.match(
    warning,
    /^config kube-proxy\.yaml: mode ipvs runs kube-nftproxy's nftables back end/,
  );
  assert.match(warning, /applied: ipvs\.syncPeriod \(1m0s\), ipvs\.minSyncPeriod \(2s\)/);
  assert.ok(
    warnings.includes(
      "config kube-proxy.yaml: ignoring nftables.syncPeriod (300s): mode is ipvs, so the ipvs " +
        "section applies",
    ),
    JSON.stringify(warnings),
  );
});

Deno.test("parseCommandLine() in mode ipvs names exactly the ipvs fields it ignores", async () => {
  const ignorable = [
    ["strictARP", "true"],
    ["excludeCIDRs", "[10.0.0.0/8]"],
    ["tcpTimeout", "15m0s"],
    ["tcpFinTimeout", "2m0s"],
    ["udpTimeout", "5m0s"],
  ] as const;
  for (const [field, value] of ignorable) {
    const { warnings } = await parse(
      FILE,
      `mode: ipvs\nipvs:\n  scheduler: rr\n  syncPeriod: 30s\n  ${field}: ${value}\n`,
    );
    const warning = ipvsWarning(warnings);
    assert.deepEqual(ignoredNames(warning), [`ipvs.${field}`], warning);
    assert.match(
      warning,
      /applied: ipvs\.syncPeriod \(30s\), ipvs\.scheduler \(rr → round-robin\)/,
    );
  }
  const all = ignorable.map(([field, value]) => `  ${field}: ${value}\n`).join("");
  const { warnings } = await parse(FILE, `mode: ipvs\nipvs:\n${all}`);
  assert.deepEqual(ignoredNames(ipvsWarning(warnings)), [
    "ipvs.strictARP",
    "ipvs.excludeCIDRs",
    "ipvs.tcpTimeout",
    "ipvs.tcpFinTimeout",
    "ipvs.udpTimeout",
  ]);
  const none = await parse(FILE, "mode: ipvs\nipvs:\n  strictARP: false\n  tcpTimeout: 0s\n");
  assert.deepEqual(ignoredNames(ipvsWarning(none.warnings)), []);
});

Deno.test("parseCommandLine() maps ipvs.scheduler, saying why where nftables cannot follow", async () => {
  const cases = [
    ["rr", "round-robin", undefined],
    ["wrr", "round-robin", /weights are all 1/],
    ["sh", "source-hash", undefined],
    ["mh", "source-hash", /not Maglev/],
    ["lc", "random", /cannot pick by connection count/],
    ["wlc", "random", /cannot pick by connection count/],
    ["sed", "random", /cannot pick by connection count/],
    ["nq", "random", /cannot pick by connection count/],
    ["lblc", "random", /cannot pick by connection count/],
    ["lblcr", "random", /cannot pick by connection count/],
    ["dh", "random", /hash of the destination/],
  ] as const;
  for (const [ipvs, scheduler, why] of cases) {
    const { config, warnings } = await parse(FILE, `mode: ipvs\nipvs:\n  scheduler: ${ipvs}\n`);
    assert.equal(config.scheduler, scheduler, ipvs);
    const warning = ipvsWarning(warnings);
    assert.ok(warning.includes(`ipvs.scheduler (${ipvs} → ${scheduler}`), warning);
    if (why !== undefined) assert.match(warning, why);
  }
  assert.throws(
    () => mapIpvsScheduler("fo", "config kube-proxy.yaml: ipvs.scheduler"),
    (error: unknown) =>
      error instanceof ConfigError &&
      error.message ===
        'config kube-proxy.yaml: ipvs.scheduler is "fo", must be an IPVS scheduler: ' +
          "rr, wrr, sh, mh, lc, wlc, sed, nq, lblc, lblcr, dh",
  );
});

Deno.test("parseCommandLine() ignores the ipvs section outside ipvs mode, with a warning", async () => {
  const { config, warnings } = await parse(
    FILE,
    "mode: nftables\nipvs:\n  scheduler: sh\n  syncPeriod: 1m0s\n",
  );
  assert.equal(config.scheduler, "random");
  assert.equal(config.syncPeriodMs, 30_000);
  assert.deepEqual(warnings, [
    "config kube-proxy.yaml: ignoring ipvs.syncPeriod (1m0s), ipvs.scheduler (sh): " +
    'mode is "nftables", so the ipvs section does not apply',
  ]);
});

Deno.test("parseCommandLine() reads --proxy-mode=ipvs and the --ipvs-* flags like the file", async () => {
  const { config, warnings } = await parse([
    "--proxy-mode=ipvs",
    "--ipvs-sync-period=45s",
    "--ipvs-min-sync-period=3s",
    "--ipvs-scheduler=sh",
    "--ipvs-strict-arp",
    "--ipvs-exclude-cidrs=10.0.0.0/8,192.168.0.0/16",
    "--ipvs-tcp-timeout=10m",
    "--ipvs-tcpfin-timeout=1m",
    "--ipvs-udp-timeout=2m",
    "--nftables-sync-period=2m",
  ]);
  assert.equal(config.mode, "nft");
  assert.equal(config.syncPeriodMs, 45_000, "--nftables-sync-period is another mode's flag");
  assert.equal(config.minSyncPeriodMs, 3_000);
  assert.equal(config.scheduler, "source-hash");
  const warning = ipvsWarning(warnings);
  assert.match(warning, /^command line: mode ipvs runs/);
  assert.deepEqual(ignoredNames(warning), [
    "--ipvs-strict-arp",
    "--ipvs-exclude-cidrs",
    "--ipvs-tcp-timeout",
    "--ipvs-tcpfin-timeout",
    "--ipvs-udp-timeout",
  ]);
  // Alone, --proxy-mode=ipvs still says what it does, and takes IPVS's default scheduler.
  const alone = await parse(["--proxy-mode=ipvs"]);
  assert.equal(alone.config.scheduler, "round-robin");
  assert.deepEqual(ignoredNames(ipvsWarning(alone.warnings)), []);
});

Deno.test("parseCommandLine() lets --ipvs-* flags override the file's ipvs section", async () => {
  const { config, warnings } = await parse(
    [...FILE, "--ipvs-scheduler=lc"],
    "mode: ipvs\nipvs:\n  scheduler: sh\n  syncPeriod: 1m0s\n",
  );
  assert.equal(config.scheduler, "random");
  assert.equal(config.syncPeriodMs, 60_000);
  assert.equal(warnings.length, 2, JSON.stringify(warnings));
  // A flag that leaves the scheduler alone leaves the file's.
  const other = await parse(
    [...FILE, "--ipvs-sync-period=2m"],
    "mode: ipvs\nipvs:\n  scheduler: sh\n  syncPeriod: 1m0s\n",
  );
  assert.equal(other.config.scheduler, "source-hash");
  assert.equal(other.config.syncPeriodMs, 120_000);
  assert.ok(!other.warnings[1].includes("scheduler"), other.warnings[1]);
});

Deno.test("parseCommandLine() ignores --ipvs-* flags outside ipvs mode, as upstream", async () => {
  const { config, warnings } = await parse(["--ipvs-sync-period=1m", "--ipvs-scheduler=sh"]);
  assert.equal(config.syncPeriodMs, 30_000);
  assert.equal(config.scheduler, "random");
  assert.deepEqual(warnings, [
    "command line: ignoring --ipvs-sync-period (1m0s), --ipvs-scheduler (sh): the mode is nft, " +
    "and --ipvs-* flags apply only in ipvs mode (--scheduler chooses nft mode's scheduler)",
  ]);
});

Deno.test("parseCommandLine() reads --scheduler, our extension, in nft mode and says iptables mode ignores it", async () => {
  for (const scheduler of ["random", "round-robin", "source-hash"] as const) {
    const { config, warnings } = await parse([`--scheduler=${scheduler}`]);
    assert.equal(config.scheduler, scheduler);
    assert.deepEqual(warnings, []);
  }
  const overriding = await parse([
    "--proxy-mode=ipvs",
    "--ipvs-scheduler=rr",
    "--scheduler=random",
  ]);
  assert.equal(overriding.config.scheduler, "random");
  const { warnings } = await parse(["--mode=iptables", "--scheduler=source-hash"]);
  assert.deepEqual(warnings, [
    "command line: ignoring --scheduler=source-hash: it applies to nft mode only; iptables mode " +
    "picks endpoints at random (statistic mode random), as kube-proxy's iptables mode does",
  ]);
  await assert.rejects(parse(["--scheduler=lc"]), ConfigError);
});
