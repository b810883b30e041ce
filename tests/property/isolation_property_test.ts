/**
 * Property: bad objects never affect good ones. A set of valid Services and EndpointSlices in
 * namespace `good` renders to exactly the same chains, rules and elements whether or not a
 * hostile cluster (refused objects, half-valid ones, other services) is listed around it, and
 * no later change to the hostile objects ever makes a partial sync touch them.
 *
 * Good objects use addresses no hostile object can hold (10.96.200.0/24, 10.250.0.0/16 and
 * their IPv6 twins), so any difference is interference, not a legitimate conflict.
 *
 * @module
 */
import assert from "node:assert/strict";
import fc from "fast-check";
import { endpointSlice, node, service } from "../fixtures/objects.ts";
import {
  type ClusterObject,
  clusterObject,
  clusterObjects,
  configVariant,
  HOSTNAME,
} from "./arbitraries.ts";
import {
  propertyRuns,
  propertySeed,
  scriptElements,
  SimulatedProxy,
  SimulatedSource,
} from "./cluster.ts";

const GOOD_NAMESPACE = "good";

const goodPort = fc.record({
  name: fc.constantFrom("http", "dns", "metrics", "grpc"),
  port: fc.integer({ min: 1, max: 65535 }),
  protocol: fc.constantFrom<"TCP" | "UDP" | "SCTP">("TCP", "UDP", "SCTP"),
  targetPort: fc.integer({ min: 1, max: 65535 }),
});

const goodService = fc.record({
  ports: fc.uniqueArray(goodPort, {
    minLength: 1,
    maxLength: 3,
    selector: (p) => p.name,
  }).map((ports) =>
    ports.filter((p, i) =>
      ports.findIndex((q) => q.port === p.port && q.protocol === p.protocol) === i
    )
  ),
  family: fc.constantFrom("IPv4", "IPv6", "dual"),
  internalTrafficPolicy: fc.constantFrom("Cluster", "Local"),
  clientIP: fc.boolean(),
  endpoints: fc.array(
    fc.record({
      index: fc.nat(999),
      ready: fc.boolean(),
      terminating: fc.boolean(),
      local: fc.boolean(),
      slice: fc.nat(1),
    }),
    { maxLength: 6 },
  ),
});

/** Valid Services (and their slices) in namespace `good`, plus this node. */
const goodObjects: fc.Arbitrary<ClusterObject[]> = fc.array(goodService, {
  minLength: 1,
  maxLength: 3,
}).map((specs) => {
  const objects: ClusterObject[] = [{
    kind: "Node",
    object: node(HOSTNAME, { ips: ["192.168.0.10"], podCIDRs: ["10.250.0.0/24"] }),
  }];
  specs.forEach((s, i) => {
    const name = `svc-${i}`;
    const v4 = `10.96.200.${i + 1}`;
    const v6 = `fd00:96:200::${i + 1}`;
    const clusterIPs = s.family === "IPv4" ? [v4] : s.family === "IPv6" ? [v6] : [v4, v6];
    objects.push({
      kind: "Service",
      object: service({
        namespace: GOOD_NAMESPACE,
        name,
        clusterIPs,
        ports: s.ports,
        spec: {
          internalTrafficPolicy: s.internalTrafficPolicy,
          ...(s.clientIP ? { sessionAffinity: "ClientIP" } : {}),
        },
      }),
    });
    for (const addressType of ["IPv4", "IPv6"] as const) {
      for (const slice of [0, 1]) {
        const endpoints = s.endpoints.filter((e) => e.slice === slice).map((e) => ({
          ip: addressType === "IPv4"
            ? `10.250.${e.index >> 8}.${e.index & 255}`
            : `fd00:250::${e.index.toString(16)}`,
          ready: e.ready,
          terminating: e.terminating,
          nodeName: e.local ? HOSTNAME : "node-b",
        }));
        if (endpoints.length === 0) continue;
        objects.push({
          kind: "EndpointSlice",
          object: endpointSlice({
            namespace: GOOD_NAMESPACE,
            name: `${name}-${addressType.toLowerCase()}-${slice}`,
            service: name,
            addressType,
            ports: s.ports.map((p) => ({ name: p.name, port: p.targetPort, protocol: p.protocol })),
            endpoints,
          }),
        });
      }
    }
  });
  return objects;
});

/** Hostile objects that are neither in namespace `good` nor this node's Node object. */
function isBystander(o: ClusterObject): boolean {
  const metadata = o.object.metadata as Record<string, unknown> | undefined;
  const namespace = typeof metadata === "object" && metadata !== null ? metadata.namespace : null;
  const name = typeof metadata === "object" && metadata !== null ? metadata.name : null;
  if (o.kind === "Node") return name !== HOSTNAME;
  return namespace !== GOOD_NAMESPACE;
}

/**
 * What a script does to the good services: the rules it writes into each of their chains (by
 * `family chain`, in order), the other commands naming those chains, and their elements.
 */
function goodPart(script: string, goodChains: ReadonlySet<string>, goodKeys: ReadonlySet<string>) {
  const rules = new Map<string, string[]>();
  const commands: string[] = [];
  for (const line of script.split("\n")) {
    const m = /^(add rule|add chain|flush chain|delete chain) (ip6?) \S+ (\S+)(?: (.*))?$/.exec(
      line,
    );
    if (m === null || !goodChains.has(`${m[2]} ${m[3]}`)) continue;
    if (m[1] !== "add rule") commands.push(`${m[1]} ${m[2]} ${m[3]}`);
    else {
      const list = rules.get(`${m[2]} ${m[3]}`) ?? [];
      list.push(m[4] ?? "");
      rules.set(`${m[2]} ${m[3]}`, list);
    }
  }
  const elements = scriptElements(script)
    .filter((e) => goodKeys.has(`${e.family} ${e.set} ${e.key}`))
    .map((e) => `${e.family} ${e.set} ${e.key}${e.rest}`)
    .sort();
  return { rules: [...rules].sort(), commands: commands.sort(), elements };
}

/** Chain names (`family chain`) and element keys of a script rendered from good objects only. */
function goodIdentity(script: string) {
  const chains = new Set<string>();
  for (const line of script.split("\n")) {
    const m = /^add chain (ip6?) \S+ (\S+)/.exec(line);
    if (m) chains.add(`${m[1]} ${m[2]}`);
  }
  const keys = new Set(scriptElements(script).map((e) => `${e.family} ${e.set} ${e.key}`));
  return { chains, keys };
}

/** Good-only chains are those a script adds beyond the fixed skeleton of an empty cluster. */
function skeletonChains(): Set<string> {
  const proxy = new SimulatedProxy({
    masqueradeAll: false,
    masqueradeBit: 14,
    clusterCIDRs: [],
    detectLocalMode: "None",
    bridgeInterface: "cbr0",
    interfaceNamePrefix: "veth",
  }, "t");
  return goodIdentity(proxy.sync()).chains;
}

Deno.test("NftPlanner renders good services identically whatever bad objects are listed beside them", () => {
  const skeleton = skeletonChains();
  fc.assert(
    fc.property(
      configVariant,
      goodObjects,
      clusterObjects,
      fc.array(fc.nat(), { maxLength: 40 }),
      (config, good, hostile, positions) => {
        const bad = hostile.filter(isBystander);
        // Interleave the bad objects with the good ones at random positions.
        const mixed = [...good];
        bad.forEach((o, i) => mixed.splice((positions[i] ?? i) % (mixed.length + 1), 0, o));

        const alone = new SimulatedProxy(config, "t");
        good.forEach(({ kind, object }) => alone.onEvent({ kind, current: object }));
        const aloneScript = alone.sync();
        const identity = goodIdentity(aloneScript);
        const goodChains = new Set([...identity.chains].filter((c) => !skeleton.has(c)));
        const expected = goodPart(aloneScript, goodChains, identity.keys);
        assert.ok(expected.elements.length > 0, "the good services render nothing");

        const together = new SimulatedProxy(config, "t");
        mixed.forEach(({ kind, object }) => together.onEvent({ kind, current: object }));
        assert.deepEqual(goodPart(together.sync(), goodChains, identity.keys), expected);
      },
    ),
    { seed: propertySeed(), numRuns: Math.ceil(propertyRuns() / 4) },
  );
});

Deno.test("NftPlanner's partial syncs never touch good services when only bad objects change", () => {
  const skeleton = skeletonChains();
  fc.assert(
    fc.property(
      configVariant,
      goodObjects,
      clusterObjects,
      fc.array(
        fc.array(fc.tuple(fc.constantFrom("put", "delete"), clusterObject, fc.nat()), {
          maxLength: 4,
        }),
        { minLength: 1, maxLength: 4 },
      ),
      (config, good, hostile, steps) => {
        const bad = hostile.filter(isBystander);
        const source = new SimulatedSource([...good, ...bad]);
        const proxy = new SimulatedProxy(config, "t");
        source.listEvents().forEach((e) => proxy.onEvent(e));
        proxy.sync();
        const alone = new SimulatedProxy(config, "t");
        good.forEach(({ kind, object }) => alone.onEvent({ kind, current: object }));
        const identity = goodIdentity(alone.sync());
        const goodChains = new Set([...identity.chains].filter((c) => !skeleton.has(c)));
        const goodCount = good.length;
        for (const step of steps) {
          for (const [op, object, target] of step) {
            if (!isBystander(object)) continue;
            // Deletes only ever target bad objects (they come after the good ones).
            const objects = source.objects;
            const victims = objects.slice(goodCount);
            if (op === "put") source.apply({ op: "put", object }).forEach((e) => proxy.onEvent(e));
            else if (victims.length > 0) {
              const index = objects.indexOf(victims[target % victims.length]);
              source.apply({ op: "delete", target: index }).forEach((e) => proxy.onEvent(e));
            }
          }
          const script = proxy.sync();
          const touched = goodPart(script, goodChains, identity.keys);
          if (script.includes("delete table") || /^flush (set|map) /m.test(script)) continue;
          assert.deepEqual(touched, { rules: [], commands: [], elements: [] }, script);
        }
      },
    ),
    { seed: propertySeed(), numRuns: Math.ceil(propertyRuns() / 4) },
  );
});
