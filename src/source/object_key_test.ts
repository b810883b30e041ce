import assert from "node:assert/strict";
import { isClusterScoped, objectKey } from "./object_key.ts";

Deno.test("objectKey() is Kind/namespace/name for Services and EndpointSlices", () => {
  const metadata = { namespace: "kube-system", name: "kube-dns" };
  assert.equal(objectKey("Service", { metadata }), "Service/kube-system/kube-dns");
  assert.equal(objectKey("EndpointSlice", { metadata }), "EndpointSlice/kube-system/kube-dns");
});

Deno.test("objectKey() is Kind/name for Nodes and ServiceCIDRs, ignoring a namespace", () => {
  assert.equal(objectKey("Node", { metadata: { name: "node-a" } }), "Node/node-a");
  assert.equal(
    objectKey("ServiceCIDR", { metadata: { namespace: "default", name: "kubernetes" } }),
    "ServiceCIDR/kubernetes",
  );
});

Deno.test("objectKey() is undefined for an object without a usable identity", () => {
  assert.equal(objectKey("Node", {}), undefined);
  assert.equal(objectKey("Node", { metadata: null }), undefined);
  assert.equal(objectKey("Node", { metadata: [] }), undefined);
  assert.equal(objectKey("Node", { metadata: { name: "" } }), undefined);
  assert.equal(objectKey("Node", { metadata: { name: 7 } }), undefined);
  assert.equal(objectKey("Service", { metadata: { name: "web" } }), undefined);
  assert.equal(objectKey("Service", { metadata: { namespace: "", name: "web" } }), undefined);
});

Deno.test("isClusterScoped() is true only for Node and ServiceCIDR", () => {
  assert.equal(isClusterScoped("Node"), true);
  assert.equal(isClusterScoped("ServiceCIDR"), true);
  assert.equal(isClusterScoped("Service"), false);
  assert.equal(isClusterScoped("EndpointSlice"), false);
});
