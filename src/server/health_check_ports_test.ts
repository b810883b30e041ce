/**
 * Specs of the health-check node ports: upstream's answers, which Services get a port, where
 * they listen, and opening and closing them as Services come and go.
 *
 * @module
 */
import assert from "node:assert/strict";
import { FakeClock } from "../runner/clock.ts";
import { ProxyState } from "../tracker/proxy_state.ts";
import { advanceUntil, emfile, FakeListener } from "../../tests/fixtures/fake_sockets.ts";
import { endpointSlice, service } from "../../tests/fixtures/objects.ts";
import {
  ALL_ADDRESSES,
  healthCheckBindIPs,
  type HealthCheckedService,
  healthCheckedServices,
  serviceHealthHandler,
  ServiceHealthServer,
} from "./health_check_ports.ts";
import type { HttpServer } from "./serve.ts";

Deno.test("serviceHealthHandler() answers 200 with upstream's body when the Service has local endpoints", async () => {
  const handle = serviceHealthHandler(() => ({
    namespace: "default",
    name: "web",
    localEndpoints: 2,
    proxyHealthy: true,
  }));
  const res = handle(new Request("http://192.168.77.1:30300/any/path"));
  assert.equal(res.status, 200);
  assert.equal(res.headers.get("content-type"), "application/json");
  assert.equal(res.headers.get("x-load-balancing-endpoint-weight"), "2");
  assert.equal(
    await res.text(),
    '{\n\t"service": {\n\t\t"namespace": "default",\n\t\t"name": "web"\n\t},\n' +
      '\t"localEndpoints": 2,\n\t"serviceProxyHealthy": true\n}',
  );
});

Deno.test("serviceHealthHandler() answers 503 without local endpoints, or while the proxy is unhealthy", async () => {
  for (const [localEndpoints, proxyHealthy] of [[0, true], [3, false]] as const) {
    const res = serviceHealthHandler(() => ({
      namespace: "shop",
      name: "cart",
      localEndpoints,
      proxyHealthy,
    }))(new Request("http://node:30300/"));
    assert.equal(res.status, 503);
    assert.equal(res.headers.get("x-load-balancing-endpoint-weight"), `${localEndpoints}`);
    assert.deepEqual(JSON.parse(await res.text()), {
      service: { namespace: "shop", name: "cart" },
      localEndpoints,
      serviceProxyHealthy: proxyHealthy,
    });
  }
});

function stateOf(
  objects: { kind: "Service" | "EndpointSlice"; current: Record<string, unknown> }[],
) {
  const state = new ProxyState({ hostname: "node-a", log: () => {} });
  objects.forEach((e) => state.onEvent(e));
  state.takeChanges();
  return state;
}

const lb = (name: string, healthCheckNodePort: number, extra: Record<string, unknown> = {}) => ({
  kind: "Service" as const,
  current: service({
    name,
    type: "LoadBalancer",
    clusterIPs: ["10.96.0.20"],
    ports: [
      { name: "http", port: 80, nodePort: 30080 },
      { name: "https", port: 443, nodePort: 30443 },
    ],
    spec: { externalTrafficPolicy: "Local", healthCheckNodePort, ...extra },
  }),
});

Deno.test("healthCheckedServices() counts distinct local ready endpoint IPs over all of a Service's ports", () => {
  const state = stateOf([
    lb("web", 30300),
    {
      kind: "EndpointSlice",
      current: endpointSlice({
        name: "web-1",
        service: "web",
        ports: [{ name: "http", port: 8080 }, { name: "https", port: 8443 }],
        endpoints: [
          "10.244.1.11",
          { ip: "10.244.1.12", ready: false, serving: true, terminating: true },
          { ip: "10.244.2.11", nodeName: "node-b" },
        ],
      }),
    },
    lb("cluster-policy", 30301, { externalTrafficPolicy: "Cluster" }),
  ]);
  assert.deepEqual(
    healthCheckedServices(state.services, state.endpoints),
    new Map([["default/web", {
      namespace: "default",
      name: "web",
      port: 30300,
      localEndpoints: 1,
    }]]),
  );
});

Deno.test("healthCheckBindIPs() listens on the node's primary IPs that are local, as upstream's nft mode", () => {
  const localAddresses = ["127.0.0.1", "192.168.77.1", "10.244.1.1", "fd00:77::1"];
  assert.deepEqual(
    healthCheckBindIPs({
      nodePortAddresses: [],
      nodeIPs: ["192.168.77.1", "fd00:77::1"],
      localAddresses,
    }),
    ["192.168.77.1", "fd00:77::1"],
  );
  assert.deepEqual(
    healthCheckBindIPs({ nodePortAddresses: ["10.244.0.0/16"], nodeIPs: [], localAddresses }),
    ["10.244.1.1"],
  );
  assert.deepEqual(
    healthCheckBindIPs({
      nodePortAddresses: ["primary"],
      nodeIPs: [],
      bindAddress: "192.168.77.1",
      localAddresses,
    }),
    ["192.168.77.1"],
  );
  assert.deepEqual(
    healthCheckBindIPs({ nodePortAddresses: ["172.16.0.0/12"], nodeIPs: [], localAddresses }),
    [],
    "no local address in the CIDRs: nothing is served",
  );
});

Deno.test("healthCheckBindIPs() listens on every address when the node-port CIDRs match all or nothing is known", () => {
  const all = [ALL_ADDRESSES];
  assert.deepEqual(healthCheckBindIPs({ nodePortAddresses: [], nodeIPs: [] }), all);
  assert.deepEqual(
    healthCheckBindIPs({
      nodePortAddresses: ["0.0.0.0/0", "::/0"],
      nodeIPs: [],
      localAddresses: [],
    }),
    all,
  );
  assert.deepEqual(healthCheckBindIPs({ nodePortAddresses: [], nodeIPs: ["192.168.77.1"] }), all);
});

/** Sockets a {@link ServiceHealthServer} would have opened, by address. */
function fakeSockets(busy: Set<string> = new Set()) {
  const open = new Map<string, (req: Request) => Response>();
  const serve = (address: string, handler: (req: Request) => Response): HttpServer => {
    if (open.has(address) || busy.has(address)) throw new Error(`${address}: address in use`);
    open.set(address, handler);
    return {
      addr: { hostname: address, port: 0 },
      close: () => {
        open.delete(address);
        return Promise.resolve();
      },
    };
  };
  return { open, serve };
}

const checked = (port: number, localEndpoints: number): Map<string, HealthCheckedService> =>
  new Map([["default/web", { namespace: "default", name: "web", port, localEndpoints }]]);

Deno.test("ServiceHealthServer.sync() opens, updates, moves and closes ports as Services change", async () => {
  const sockets = fakeSockets();
  const logs: string[] = [];
  const server = new ServiceHealthServer({
    proxyHealthy: () => true,
    serve: sockets.serve,
    log: (l) => logs.push(l),
  });
  const bindIPs = ["192.168.77.1", "fd00:77::1"];
  await server.sync(checked(30300, 1), { bindIPs });
  assert.deepEqual([...sockets.open.keys()], ["192.168.77.1:30300", "[fd00:77::1]:30300"]);
  const ask = () => sockets.open.get("192.168.77.1:30300")!(new Request("http://n/"));
  assert.equal(ask().status, 200);

  await server.sync(checked(30300, 0), { bindIPs });
  assert.equal(ask().status, 503, "the count changed without reopening the port");

  await server.sync(checked(30301, 1), { bindIPs });
  assert.deepEqual([...sockets.open.keys()], ["192.168.77.1:30301", "[fd00:77::1]:30301"]);

  await server.sync(checked(30301, 1), { bindIPs: ["192.168.77.1"] });
  assert.deepEqual([...sockets.open.keys()], ["192.168.77.1:30301"]);

  await server.sync(new Map(), { bindIPs: [] });
  assert.deepEqual([...sockets.open.keys()], []);
  assert.deepEqual(server.ports, new Map());
  assert.ok(
    logs.some((l) => l.startsWith("closing health check port 30301 of Service default/web")),
  );
});

Deno.test("ServiceHealthServer.sync() logs a port it cannot bind once and binds it on a later sync", async () => {
  const busy = new Set(["[fd00:77::1]:30300"]);
  const sockets = fakeSockets(busy);
  const logs: string[] = [];
  const failures: [string, string][] = [];
  const server = new ServiceHealthServer({
    proxyHealthy: () => true,
    serve: sockets.serve,
    log: (l) => logs.push(l),
    hostname: "node-a",
    onOpenFailed: (s, message) => failures.push([`${s.namespace}/${s.name}`, message]),
  });
  const bindIPs = ["192.168.77.1", "fd00:77::1"];
  await server.sync(checked(30300, 1), { bindIPs });
  await server.sync(checked(30300, 1), { bindIPs });
  assert.deepEqual([...sockets.open.keys()], [], "no half-open Service");
  assert.equal(logs.filter((l) => l.startsWith("cannot open health check port 30300")).length, 1);
  assert.deepEqual(failures, [[
    "default/web",
    'node node-a failed to start healthcheck "default/web" on port 30300: ' +
    "[fd00:77::1]:30300: address in use",
  ]]);
  busy.clear();
  await server.sync(checked(30300, 1), { bindIPs });
  assert.equal(sockets.open.size, 2);
  await server.close();
  assert.equal(sockets.open.size, 0);
});

Deno.test("ServiceHealthServer answers load-balancer probes over a real socket on loopback", async () => {
  const probe = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const port = probe.addr.port;
  probe.close(); // a free port to ask for
  let healthy = true;
  const server = new ServiceHealthServer({ proxyHealthy: () => healthy });
  try {
    await server.sync(checked(port, 1), { bindIPs: ["127.0.0.1"] });
    const first = await fetch(`http://127.0.0.1:${port}/`);
    assert.equal(first.status, 200);
    assert.equal(first.headers.get("x-load-balancing-endpoint-weight"), "1");
    assert.equal((await first.json()).localEndpoints, 1);
    healthy = false;
    const second = await fetch(`http://127.0.0.1:${port}/`);
    assert.equal(second.status, 503);
    assert.equal((await second.json()).serviceProxyHealthy, false);
  } finally {
    await server.close();
  }
  await assert.rejects(fetch(`http://127.0.0.1:${port}/`), "closed with the Service");
});

Deno.test("ServiceHealthServer: a health-check port survives accept errors, logs them once, and answers after", async () => {
  const clock = new FakeClock();
  const listener = new FakeListener();
  const logs: string[] = [];
  const server = new ServiceHealthServer({
    proxyHealthy: () => true,
    serveOptions: { listen: () => listener, clock, log: (line) => logs.push(line) },
  });
  try {
    await server.sync(checked(30300, 1), { bindIPs: ["192.168.77.1"] });
    for (let i = 0; i < 3; i++) listener.fail(emfile());
    const conn = listener.connect();
    conn.send("GET / HTTP/1.1\r\nHost: 192.168.77.1:30300\r\n\r\n");
    await advanceUntil(clock, () => conn.written().includes('"localEndpoints": 1'));
    assert.match(conn.written(), /^HTTP\/1\.1 200 OK\r\n/);
    assert.equal(logs.length, 1);
    assert.match(
      logs[0],
      /^health-check server on 192\.168\.77\.1:30300: cannot accept .*\[EMFILE\]/,
    );
  } finally {
    await server.close();
  }
});
