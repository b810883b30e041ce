import assert from "node:assert/strict";
import { endpointSlice } from "../../tests/fixtures/objects.ts";
import { convertEndpointSlice, mergeSlices, type SliceInfo } from "./convert_endpoint_slice.ts";

function slice(raw: Record<string, unknown>): SliceInfo {
  const result = convertEndpointSlice(raw);
  assert.ok(result.ok && result.slice);
  return result.slice;
}

Deno.test("convertEndpointSlice() applies upstream's condition defaults", () => {
  const raw = endpointSlice({ name: "s", service: "web", endpoints: ["10.244.1.11"] });
  (raw.endpoints as Record<string, unknown>[])[0].conditions = {};
  const [ep] = slice(raw).endpoints;
  assert.deepEqual([ep.ready, ep.serving, ep.terminating], [true, true, false]);
});

Deno.test("convertEndpointSlice() drops one bad address and keeps the rest, with a warning", () => {
  const result = convertEndpointSlice(
    endpointSlice({ name: "s", service: "web", endpoints: ["10.244.1.11", "10.244.1.300"] }),
  );
  assert.ok(result.ok && result.slice);
  assert.deepEqual(result.slice.endpoints.map((e) => e.ip), ["10.244.1.11"]);
  assert.match(result.warnings[0], /EndpointSlice default\/s: endpoints\[1\]\.addresses\[0\]/);
});

Deno.test("convertEndpointSlice() refuses a slice without its service-name label", () => {
  const raw = endpointSlice({ name: "s", service: "web", endpoints: [] });
  (raw.metadata as { labels: Record<string, string> }).labels = {};
  const result = convertEndpointSlice(raw);
  assert.equal(result.ok, false);
});

Deno.test("convertEndpointSlice() ignores FQDN slices and slices for another proxy", () => {
  for (
    const raw of [
      endpointSlice({ name: "s", service: "web", addressType: "FQDN", endpoints: [] }),
      endpointSlice({
        name: "t",
        service: "web",
        endpoints: ["10.244.1.11"],
        labels: { "service.kubernetes.io/service-proxy-name": "other" },
      }),
    ]
  ) {
    const result = convertEndpointSlice(raw);
    assert.ok(result.ok);
    assert.equal(result.slice, null);
  }
});

Deno.test("mergeSlices() merges several slices and deduplicates an endpoint, preferring ready", () => {
  const a = slice(endpointSlice({
    name: "web-a",
    service: "web",
    endpoints: [{ ip: "10.244.1.11", ready: false }, "10.244.1.12"],
  }));
  const b = slice(endpointSlice({
    name: "web-b",
    service: "web",
    endpoints: [{ ip: "10.244.1.11", ready: true, nodeName: "node-b" }],
  }));
  const merged = mergeSlices([b, a], "node-a");
  const eps = merged.get("default/web:http/TCP")!;
  assert.deepEqual(eps.map((e) => [e.ip, e.ready, e.isLocal]), [
    ["10.244.1.11", true, false],
    ["10.244.1.12", true, true],
  ]);
});

Deno.test("mergeSlices() keeps an address once per port number where slices disagree on the number", () => {
  const at = (name: string, port: number, ips: (string | { ip: string; ready: boolean })[]) =>
    slice(endpointSlice({ name, service: "web", ports: [{ name: "http", port }], endpoints: ips }));
  const merged = mergeSlices([
    at("web-c", 9090, ["10.244.1.11"]),
    at("web-a", 8080, ["10.244.1.11", "10.244.1.12"]),
    at("web-b", 9090, [{ ip: "10.244.1.11", ready: false }, "10.244.1.13"]),
  ], "node-a");
  assert.deepEqual(merged.get("default/web:http/TCP")!.map((e) => [e.ip, e.port, e.ready]), [
    ["10.244.1.11", 8080, true],
    ["10.244.1.12", 8080, true],
    ["10.244.1.11", 9090, true],
    ["10.244.1.13", 9090, true],
  ]);
});
