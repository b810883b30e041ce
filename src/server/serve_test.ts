/**
 * Specs of bind-address parsing for the health and metrics servers.
 *
 * @module
 */
import assert from "node:assert/strict";
import { parseBindAddress, ServeError, serveHttp } from "./serve.ts";

Deno.test("parseBindAddress() reads kube-proxy's IPv4 and bracketed IPv6 bind addresses", () => {
  assert.deepEqual(parseBindAddress("0.0.0.0:10256"), { hostname: "0.0.0.0", port: 10256 });
  assert.deepEqual(parseBindAddress("[::]:10256"), { hostname: "::", port: 10256 });
  assert.deepEqual(parseBindAddress("127.0.0.1:0"), { hostname: "127.0.0.1", port: 0 });
});

Deno.test("parseBindAddress() refuses names, bare IPs, unbracketed IPv6 and bad ports", () => {
  for (const bad of ["localhost:80", "0.0.0.0", "::1:80", "[::1]", "1.2.3.4:", "1.2.3.4:65536"]) {
    assert.throws(() => parseBindAddress(bad), ServeError, bad);
  }
});

Deno.test("serveHttp() serves on [::1] and its close() may be called twice", async () => {
  const server = serveHttp("[::1]:0", () => new Response("pong"), { name: "test" });
  assert.ok(server);
  try {
    const res = await fetch(`http://[::1]:${server.addr.port}/`);
    assert.equal(await res.text(), "pong");
  } finally {
    await Promise.all([server.close(), server.close()]);
  }
});
