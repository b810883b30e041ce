import assert from "node:assert/strict";
import { generateCluster } from "./cluster.ts";
import { renderUpstreamLayout } from "./upstream_layout.ts";

Deno.test("renderUpstreamLayout() writes a chain per service with its endpoints in an inline numgen map", () => {
  const cluster = generateCluster({ services: 2, endpoints: 3 });
  const script = renderUpstreamLayout(cluster);
  const chains = script.split("\n").filter((l) => /^add chain ip kube-proxy service-/.test(l));
  assert.equal(chains.length, 2);
  const chain = chains[0].split(" ").at(-1)!;
  assert.match(chain, /^service-[A-Z2-7]{8}-ns-0000\/svc-000000\/tcp\/p$/);
  const ip = cluster.clusterIP(0);
  const ips = (cluster.slices[0][0].endpoints as { addresses: string[] }[]).map((e) =>
    e.addresses[0]
  );
  assert.ok(script.includes(
    `add rule ip kube-proxy ${chain} meta l4proto tcp dnat to numgen random mod 3 map ` +
      `{ 0 : ${ips[0]} . 8080, 1 : ${ips[1]} . 8080, 2 : ${ips[2]} . 8080 }\n`,
  ));
  assert.ok(script.includes(
    `add rule ip kube-proxy ${chain} ip daddr ${ip} tcp dport 80 ip saddr != 10.128.0.0/9 ` +
      `jump mark-for-masquerade\n`,
  ));
  assert.ok(
    script.includes(`add element ip kube-proxy service-ips { ${ip} . tcp . 80 : goto ${chain} }`),
  );
});

Deno.test("renderUpstreamLayout() gives a service without endpoints no chain", () => {
  const script = renderUpstreamLayout(generateCluster({ services: 3, endpoints: 0 }), {
    table: "up",
  });
  assert.equal(script.match(/^add chain ip up service-/gm), null);
  assert.equal(script.match(/^add element ip up cluster-ips/gm)?.length, 3);
});
