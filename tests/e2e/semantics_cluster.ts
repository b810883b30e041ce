/**
 * The cluster the data-plane semantics suite programs: one Service per behaviour, named after
 * it, with addresses from the IP plan. Pod `pod-c` is declared on another node (`node-b`), so
 * local and remote endpoints can be told apart on a one-node topology.
 *
 * @module
 */
import type { RawObject } from "../../src/source/events.ts";
import {
  endpointSlice,
  type EndpointSpec,
  node,
  type PortSpec,
  service,
  serviceCIDR,
} from "../fixtures/objects.ts";
import { POD_PORT, SERVICE_CIDR_V4, SERVICE_CIDR_V6 } from "../fixtures/ip_plan.ts";
import type { Topology } from "../netns/topology.ts";

/** Addresses of the suite's services and entry points. */
export const ADDR = {
  web: "10.96.0.10",
  web6: "fd00:10:96::10",
  empty: "10.96.0.11",
  nodePort: "10.96.0.12",
  nodePortLocal: "10.96.0.13",
  nodePortLocalNone: "10.96.0.14",
  external: "10.96.0.15",
  externalIP: "203.0.113.10",
  lb: "10.96.0.16",
  lbIP: "203.0.113.20",
  lbDenied: "10.96.0.17",
  lbDeniedIP: "203.0.113.21",
  lbProxy: "10.96.0.18",
  lbProxyIP: "203.0.113.22",
  sticky: "10.96.0.19",
  internalLocal: "10.96.0.20",
  internalLocalNone: "10.96.0.21",
  terminating: "10.96.0.22",
  zoned: "10.96.0.23",
  zonedPartly: "10.96.0.24",
  foreign: "10.96.0.25",
  unallocated: "10.96.0.99",
  nodePort6: "fd00:10:96::12",
  empty6: "fd00:10:96::11",
  nodePortLocal6: "fd00:10:96::13",
  sticky6: "fd00:10:96::19",
  unallocated6: "fd00:10:96::99",
} as const;

/** Node ports of the suite. */
export const NODE_PORTS = {
  nodePort: 30080,
  nodePortLocal: 30081,
  nodePortLocalNone: 30082,
  lb: 30083,
} as const;

/** The suite's objects for a topology (pods a and b on this node, pod-c on node-b). */
export function semanticsCluster(topo: Topology): RawObject[] {
  const [a, b, c] = topo.pods;
  const remote = (ip: string): EndpointSpec => ({ ip, nodeName: "node-b" });
  const http: PortSpec[] = [{ name: "http", port: 80 }];
  const objects: RawObject[] = [
    node("node-a", {
      ips: [topo.node.ip4, topo.node.ip6!],
      zone: "zone-a",
      podCIDRs: ["10.244.1.0/24", "fd00:10:244:1::/64"],
    }),
    serviceCIDR("kubernetes", [SERVICE_CIDR_V4, SERVICE_CIDR_V6]),
  ];
  const add = (
    name: string,
    spec: Parameters<typeof service>[0],
    endpoints: (string | EndpointSpec)[],
    v6Endpoints: (string | EndpointSpec)[] = [],
  ) => {
    objects.push(service({ ...spec, name }));
    const ports = (spec.ports ?? http).map((p) => ({
      name: p.name,
      port: POD_PORT,
      protocol: p.protocol,
    }));
    objects.push(endpointSlice({ name: `${name}-v4`, service: name, ports, endpoints }));
    if (v6Endpoints.length > 0) {
      objects.push(
        endpointSlice({
          name: `${name}-v6`,
          service: name,
          addressType: "IPv6",
          ports,
          endpoints: v6Endpoints,
        }),
      );
    }
  };
  add(
    "web",
    {
      name: "web",
      clusterIPs: [ADDR.web, ADDR.web6],
      ports: [{ name: "http", port: 80 }, { name: "echo", port: 80, protocol: "UDP" }],
    },
    [a.ip4, b.ip4, remote(c.ip4)],
    [a.ip6!, b.ip6!, remote(c.ip6!)],
  );
  add("empty", { name: "empty", clusterIPs: [ADDR.empty, ADDR.empty6] }, []);
  add(
    "node-port",
    {
      name: "node-port",
      type: "NodePort",
      clusterIPs: [ADDR.nodePort, ADDR.nodePort6],
      ports: [{ name: "http", port: 80, nodePort: NODE_PORTS.nodePort }],
    },
    [a.ip4, b.ip4],
    [a.ip6!, b.ip6!],
  );
  add(
    "node-port-local",
    {
      name: "node-port-local",
      type: "NodePort",
      clusterIPs: [ADDR.nodePortLocal, ADDR.nodePortLocal6],
      ports: [{ name: "http", port: 80, nodePort: NODE_PORTS.nodePortLocal }],
      spec: { externalTrafficPolicy: "Local" },
    },
    [a.ip4, remote(c.ip4)],
    [a.ip6!, remote(c.ip6!)],
  );
  add("node-port-local-none", {
    name: "node-port-local-none",
    type: "NodePort",
    clusterIPs: [ADDR.nodePortLocalNone],
    ports: [{ name: "http", port: 80, nodePort: NODE_PORTS.nodePortLocalNone }],
    spec: { externalTrafficPolicy: "Local" },
  }, [remote(c.ip4)]);
  add("external", {
    name: "external",
    clusterIPs: [ADDR.external],
    spec: { externalIPs: [ADDR.externalIP] },
  }, [a.ip4, b.ip4]);
  const lb = (
    name: string,
    clusterIP: string,
    ip: string,
    extra: Record<string, unknown>,
    ipMode?: string,
  ) =>
    add(name, {
      name,
      type: "LoadBalancer",
      clusterIPs: [clusterIP],
      ports: [{ name: "http", port: 80, ...(name === "lb" ? { nodePort: NODE_PORTS.lb } : {}) }],
      spec: extra,
      status: { loadBalancer: { ingress: [{ ip, ...(ipMode ? { ipMode } : {}) }] } },
    }, [a.ip4, b.ip4]);
  lb("lb", ADDR.lb, ADDR.lbIP, { loadBalancerSourceRanges: [" 192.168.77.0/24 "] });
  lb("lb-denied", ADDR.lbDenied, ADDR.lbDeniedIP, {
    loadBalancerSourceRanges: ["198.51.100.0/24"],
  });
  lb("lb-proxy", ADDR.lbProxy, ADDR.lbProxyIP, {}, "Proxy");
  add(
    "sticky",
    {
      name: "sticky",
      clusterIPs: [ADDR.sticky, ADDR.sticky6],
      spec: {
        sessionAffinity: "ClientIP",
        sessionAffinityConfig: { clientIP: { timeoutSeconds: 60 } },
      },
    },
    [a.ip4, b.ip4, remote(c.ip4)],
    [a.ip6!, b.ip6!, remote(c.ip6!)],
  );
  add("internal-local", {
    name: "internal-local",
    clusterIPs: [ADDR.internalLocal],
    spec: { internalTrafficPolicy: "Local" },
  }, [a.ip4, remote(c.ip4)]);
  add("internal-local-none", {
    name: "internal-local-none",
    clusterIPs: [ADDR.internalLocalNone],
    spec: { internalTrafficPolicy: "Local" },
  }, [remote(c.ip4)]);
  add("terminating", { name: "terminating", clusterIPs: [ADDR.terminating] }, [
    { ip: a.ip4, ready: false, serving: true, terminating: true },
    { ip: b.ip4, ready: false, serving: false, terminating: true },
  ]);
  add("zoned", { name: "zoned", clusterIPs: [ADDR.zoned] }, [
    { ip: a.ip4, hints: { forZones: ["zone-a"] } },
    { ip: b.ip4, hints: { forZones: ["zone-b"] } },
    { ip: c.ip4, nodeName: "node-b", hints: { forZones: ["zone-b"] } },
  ]);
  add("zoned-partly", { name: "zoned-partly", clusterIPs: [ADDR.zonedPartly] }, [
    { ip: a.ip4, hints: { forZones: ["zone-a"] } },
    { ip: b.ip4 },
  ]);
  add("foreign", {
    name: "foreign",
    clusterIPs: [ADDR.foreign],
    labels: { "service.kubernetes.io/service-proxy-name": "another-proxy" },
  }, [a.ip4]);
  objects.push(service({ name: "headless", clusterIPs: ["None"] }));
  objects.push(
    service({
      name: "external-name",
      clusterIPs: [],
      type: "ExternalName",
      spec: { externalName: "example.org" },
    }),
  );
  return objects;
}
