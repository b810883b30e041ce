/**
 * Specs of the metrics server's debugging pages: `/configz`, `/flagz`, `/statusz`,
 * `/healthz/ping`, answered by {@link metricsHandler} as upstream's current release answers them.
 *
 * @module
 */
import assert from "node:assert/strict";
import { DEFAULT_CONFIG } from "../config/config.ts";
import { metricsHandler, ProxyMetrics } from "./metrics.ts";
import { unixDate } from "./status_pages.ts";

const config = { ...DEFAULT_CONFIG, hostname: "node-a", masqueradeAll: true };
const handler = metricsHandler(new ProxyMetrics(), {
  config,
  argv: ["--config=/var/lib/kube-proxy/config.conf", "--hostname-override", "node-a", "-v=2"],
  startedAt: Date.now() - 3_725_000,
});
const get = async (path: string) => {
  const response = await handler(new Request(`http://node:10249${path}`));
  return {
    status: response.status,
    type: response.headers.get("content-type"),
    body: await response.text(),
  };
};

Deno.test("/configz is the effective configuration under kubeproxy.config.k8s.io, as JSON", async () => {
  const page = await get("/configz");
  assert.equal(page.status, 200);
  assert.equal(page.type, "application/json");
  const body = JSON.parse(page.body);
  assert.deepEqual(Object.keys(body), ["kubeproxy.config.k8s.io"]);
  const section = body["kubeproxy.config.k8s.io"];
  assert.equal(section.hostnameOverride, "node-a");
  assert.equal(section.metricsBindAddress, DEFAULT_CONFIG.metricsBindAddress);
  assert.equal(section.nftables.masqueradeAll, true);
  assert.equal(section.kind, undefined);
});

Deno.test("/flagz lists the flags given as name=value; /statusz the start, uptime, versions, paths", async () => {
  const flagz = await get("/flagz");
  assert.equal(flagz.status, 200);
  assert.match(flagz.type!, /^text\/plain/);
  const lines = flagz.body.split("\n");
  assert.equal(lines[0], "kube-proxy flags");
  assert.match(lines[1], /^Warning: This endpoint is not meant to be machine parseable/);
  assert.deepEqual(lines.slice(3, 6), [ // sorted by name
    "config=/var/lib/kube-proxy/config.conf",
    "hostname-override=node-a",
    "v=2",
  ]);
  const statusz = (await get("/statusz")).body;
  assert.match(statusz, /^kube-proxy statusz\n/);
  assert.match(statusz, /\nStarted: \w{3} \w{3} [ \d]\d [\d:]{8} UTC \d{4}\n/);
  assert.match(statusz, /\nUp: 1 hr 02 min 0[5-9] sec\n/);
  assert.match(statusz, /\nGo version: deno \d/);
  assert.match(statusz, /\nBinary version: kube-nftproxy \d+\.\d+\.\d+\n/);
  assert.match(statusz, /\nPaths: .*\/configz .*\/flagz .*\/metrics .*\/statusz/);
});

Deno.test("/healthz/ping answers ok, as upstream's", async () => {
  assert.deepEqual(await get("/healthz/ping"), {
    status: 200,
    type: "text/plain; charset=utf-8",
    body: "ok",
  });
});

Deno.test("unixDate() prints Go's time.UnixDate in UTC", () => {
  assert.equal(
    unixDate(new Date(Date.UTC(2026, 10, 5, 22, 21, 56))),
    "Thu Nov  5 22:21:56 UTC 2026",
  );
  assert.equal(
    unixDate(new Date(Date.UTC(2024, 9, 16, 21, 3, 43))),
    "Wed Oct 16 21:03:43 UTC 2024",
  );
});
