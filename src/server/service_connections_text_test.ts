import assert from "node:assert/strict";
import {
  ServiceConnectionsText,
  type ServiceConnectionsTotal,
} from "./service_connections_text.ts";

Deno.test("ServiceConnectionsText writes one counter line per service port, in the source's order", async () => {
  const text = new ServiceConnectionsText();
  let totals: ServiceConnectionsTotal[] = [
    { namespace: "default", service: "web", port: "http", connections: 3 },
    { namespace: "kube-system", service: "kube-dns", port: "dns", connections: 12 },
  ];
  text.from(() => Promise.resolve(totals));
  assert.equal(
    await text.render(),
    "# HELP kubenftproxy_service_connections_total New connections dispatched to each service " +
      "port, over all its entry points\n" +
      "# TYPE kubenftproxy_service_connections_total counter\n" +
      'kubenftproxy_service_connections_total{namespace="default",service="web",port="http"} 3\n' +
      'kubenftproxy_service_connections_total{namespace="kube-system",service="kube-dns",port="dns"} 12\n',
  );
  totals = [{ namespace: "default", service: "web", port: "http", connections: 4 }];
  assert.match(await text.render(), /port="http"\} 4\n$/);
});

Deno.test("ServiceConnectionsText names each line's port when ports come and go between scrapes", async () => {
  const text = new ServiceConnectionsText();
  const port = (service: string, connections: number) => ({
    namespace: "default",
    service,
    port: "http",
    connections,
  });
  let totals: ServiceConnectionsTotal[] = [port("a", 1), port("c", 3)];
  text.from(() => Promise.resolve(totals));
  await text.render();
  const lines = async () =>
    (await text.render()).split("\n").filter((line) => line.startsWith("kube")).map((line) =>
      line.replace(/^.*service="([^"]*)".* (\d+)$/, "$1 $2")
    );
  totals = [port("a", 2), port("b", 5), port("c", 4)];
  assert.deepEqual(await lines(), ["a 2", "b 5", "c 4"]);
  totals = [port("b", 6), port("c", 4)];
  assert.deepEqual(await lines(), ["b 6", "c 4"]);
});

Deno.test("ServiceConnectionsText escapes label values as the text format requires", async () => {
  const text = new ServiceConnectionsText();
  text.from(() =>
    Promise.resolve([{ namespace: "a", service: 'we"b\\', port: "x\ny", connections: 1 }])
  );
  assert.match(await text.render(), /\{namespace="a",service="we\\"b\\\\",port="x\\ny"\} 1\n$/);
});

Deno.test("ServiceConnectionsText keeps the last block when the source fails, and is empty without one", async () => {
  const text = new ServiceConnectionsText();
  assert.equal(await text.render(), "");
  let fail = false;
  text.from(() =>
    fail
      ? Promise.reject(new Error("no such table"))
      : Promise.resolve([{ namespace: "d", service: "s", port: "", connections: 2 }])
  );
  const first = await text.render();
  fail = true;
  assert.equal(await text.render(), first);
});
