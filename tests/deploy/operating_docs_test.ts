/**
 * docs/operating.md stays true to the code it describes: its metrics table lists exactly the
 * metrics the proxy registers (in either mode), and every relative link points at a file that
 * exists.
 *
 * @module
 */
import assert from "node:assert/strict";
import { dirname, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { ProxyMetrics } from "../../src/server/metrics.ts";
import { SERVICE_CONNECTIONS_METRIC } from "../../src/server/service_connections_text.ts";

const PATH = fileURLToPath(new URL("../../docs/operating.md", import.meta.url));
const docs = await Deno.readTextFile(PATH);

Deno.test("docs/operating.md lists every metric the proxy registers in nft and iptables mode, and no other", () => {
  const registered = new Set([
    ...(["nft", "iptables"] as const).flatMap((mode) =>
      new ProxyMetrics({ mode }).registry.getMetricsAsArray().map((metric) => metric.name)
    ),
    // Written apart from the registry (service_connections_text.ts).
    SERVICE_CONNECTIONS_METRIC,
  ]);
  const documented = new Set(
    [...docs.matchAll(
      /^\| `((?:kubeproxy|kubenftproxy|process|rest_client|kubernetes)_[a-z_]+)(?:\{[a-z_,…]+\})?`/gm,
    )]
      .map((match) => match[1]),
  );
  assert.deepEqual([...documented].sort(), [...registered].sort());
});

Deno.test("docs/operating.md's relative links point at files in the repository", async () => {
  const targets = [...docs.matchAll(/\]\((?!https?:|#)([^)#\s]+)/g)].map((match) => match[1]);
  assert.ok(targets.length > 0);
  for (const target of targets) {
    const stat = await Deno.stat(resolve(dirname(PATH), target)).catch(() => undefined);
    assert.ok(stat !== undefined, `broken link: ${target}`);
  }
});
