import assert from "node:assert/strict";
import { endpointSlice, node, service, serviceCIDR } from "../../tests/fixtures/objects.ts";
import { stringify } from "../../tests/e2e/yaml.ts";
import { diffTables } from "../dryrun/table_diff.ts";
import { tablesFromListing, tablesFromScript } from "../dryrun/table_image.ts";
import type { Source, SourceHandler } from "../source/events.ts";
import { DEFAULT_CONFIG } from "../config/config.ts";
import { explainCommand, explainInputFromSource } from "./command.ts";
import { kernelAgreement } from "./live.ts";

function cluster(webEndpoints: string[]): string {
  return stringify([
    node("node-a", { ips: ["192.168.77.1"] }),
    serviceCIDR("kubernetes", ["10.96.0.0/16"]),
    service({ name: "web", clusterIPs: ["10.96.0.10"] }),
    endpointSlice({ name: "web-1", service: "web", endpoints: webEndpoints }),
    service({ name: "db", clusterIPs: ["10.96.0.20"] }),
    endpointSlice({ name: "db-1", service: "db", endpoints: ["10.244.1.30"] }),
  ]);
}

/**
 * Runs `explain --live` on the cluster `wanted` while the kernel holds the rules of the cluster
 * `kernel`; returns what it printed.
 */
async function explainLive(to: string, wanted: string, kernel: string): Promise<string> {
  const args = [
    "--from",
    "192.168.77.2",
    "--to",
    to,
    "--from-file=c.yaml",
    "--hostname-override=node-a",
    "--live",
  ];
  const scripts: string[] = [];
  // The kernel's tables: the script the proxy wants for `kernel`, captured by a first run.
  const silent = { print: () => {}, printError: () => {} };
  await explainCommand(args, {
    ...silent,
    readTextFile: () => Promise.resolve(kernel),
    kernelDiff: (script) => {
      scripts.push(script);
      return Promise.resolve({ tables: [], script: "" });
    },
  });
  const out: string[] = [];
  const errors: string[] = [];
  const code = await explainCommand(args, {
    readTextFile: () => Promise.resolve(wanted),
    print: (t) => out.push(t),
    printError: (l) => errors.push(l),
    kernelDiff: (script) =>
      Promise.resolve(diffTables(tablesFromScript(scripts[0]), tablesFromScript(script))),
  });
  assert.equal(code, 0, errors.join("\n"));
  return out.join("\n");
}

const BOTH = cluster(["10.244.1.11", "10.244.1.12"]);
const ONE = cluster(["10.244.1.11"]);

Deno.test("explain --live says the live rules are the explained ones when the kernel matches", async () => {
  const text = await explainLive("10.96.0.10:80/tcp", BOTH, BOTH);
  assert.match(text, /^verdict: +dnat/m);
  assert.match(text, /^kernel: +the live rules are these \(nothing to change\)$/m);
});

Deno.test("explain --live shows what the kernel lacks for this packet when it is behind", async () => {
  const text = await explainLive("10.96.0.10:80/tcp", BOTH, ONE);
  assert.match(text, /^kernel: +the live rules DIFFER for this packet/m);
  assert.match(
    text,
    /^ {2}add element ip kube-nftproxy cluster-endpoints-tcp \{ 10\.96\.0\.10 \. tcp \. 80 \. 1 .*10\.244\.1\.12 \. 8080 \}$/m,
  );
  assert.doesNotMatch(text, /10\.96\.0\.20/, "another service's differences are not this packet's");
});

Deno.test("explain --live tells a packet the difference does not concern that its rules hold", async () => {
  const text = await explainLive("10.96.0.20:80/tcp", BOTH, ONE);
  assert.match(
    text,
    /^kernel: +the live rules agree for this packet \(\d+ commands would change others; see --dry-run\)$/m,
  );
});

Deno.test("kernelAgreement() finds a packet's differences in what nft 1.0.6 and 1.1.3 list", () => {
  const fixtures = new URL("../../tests/fixtures/nft/", import.meta.url);
  const read = (path: string) => Deno.readTextFileSync(new URL(path, fixtures));
  for (const release of ["1.0.6", "1.1.3"]) {
    const kernel = tablesFromListing(
      read(`${release}/list-table-ip.nft`) + read(`${release}/list-table-ip6.nft`),
    );
    // The proxy no longer wants the SCTP service's entry point; the kernel still has it.
    const wanted = tablesFromScript(read("semantics-cluster.nft"));
    wanted.get("ip kube-nftproxy")!.sets.get("service-ips")!.elements.delete(
      "10.96.0.30 . sctp . 90",
    );
    const diff = diffTables(kernel, wanted);
    const agreement = (address: string, protocol: "tcp" | "sctp", port: number) =>
      kernelAgreement(diff, { from: "192.168.77.2", to: { address, protocol, port } }, {
        toNode: false,
        path: ["nat-prerouting", "services"],
      });
    assert.deepEqual(agreement("10.96.0.30", "sctp", 90).differences, [
      "delete element ip kube-nftproxy service-ips { 10.96.0.30 . sctp . 90 }",
    ], release);
    assert.equal(agreement("10.96.0.10", "tcp", 80).packetMatches, true, release);
  }
});

Deno.test("explainInputFromSource() gives up, stopping the source, when the cluster is not listed in time", async () => {
  let stopped = false;
  const never: Source = {
    start: (_: SourceHandler) => Promise.resolve(),
    stop: () => {
      stopped = true;
      return Promise.resolve();
    },
  };
  await assert.rejects(
    explainInputFromSource(never, { ...DEFAULT_CONFIG, hostname: "node-a" }, { timeoutMs: 20 }),
    /not listed within 20 ms/,
  );
  assert.equal(stopped, true);
});
