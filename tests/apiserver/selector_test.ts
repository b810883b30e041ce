import assert from "node:assert/strict";
import { parseFieldSelector, parseLabelSelector, SelectorError } from "./selector.ts";

function labelled(labels: Record<string, string>) {
  return { metadata: { namespace: "default", name: "web", labels } };
}

Deno.test("parseLabelSelector() selects everything when empty", () => {
  assert.equal(parseLabelSelector("")(labelled({})), true);
});

Deno.test("parseLabelSelector() applies every supported operator", () => {
  const rows: { selector: string; labels: Record<string, string>; expect: boolean }[] = [
    { selector: "app", labels: { app: "x" }, expect: true },
    { selector: "app", labels: {}, expect: false },
    { selector: "!app", labels: {}, expect: true },
    { selector: "!app", labels: { app: "" }, expect: false },
    { selector: "app=web", labels: { app: "web" }, expect: true },
    { selector: "app==web", labels: { app: "api" }, expect: false },
    { selector: "app!=web", labels: {}, expect: true },
    { selector: "app!=web", labels: { app: "web" }, expect: false },
    { selector: "app in (web, api)", labels: { app: "api" }, expect: true },
    { selector: "app in (web,api)", labels: {}, expect: false },
    { selector: "app notin (web,api)", labels: { app: "db" }, expect: true },
    { selector: "app notin (web,api)", labels: { app: "web" }, expect: false },
    {
      selector: "!service.kubernetes.io/headless,!service.kubernetes.io/service-proxy-name",
      labels: { "service.kubernetes.io/service-proxy-name": "other" },
      expect: false,
    },
    {
      selector: "!service.kubernetes.io/headless,!service.kubernetes.io/service-proxy-name",
      labels: { app: "web" },
      expect: true,
    },
  ];
  for (const row of rows) {
    assert.equal(
      parseLabelSelector(row.selector)(labelled(row.labels)),
      row.expect,
      `${row.selector} on ${JSON.stringify(row.labels)}`,
    );
  }
});

Deno.test("parseLabelSelector() rejects malformed selectors", () => {
  for (const bad of ["app in (web", "a,,b", "app=we b", "-bad", "app in web)"]) {
    assert.throws(() => parseLabelSelector(bad), SelectorError, bad);
  }
});

Deno.test("parseFieldSelector() matches metadata.name and metadata.namespace", () => {
  const object = labelled({});
  assert.equal(parseFieldSelector("metadata.name=web")(object), true);
  assert.equal(parseFieldSelector("metadata.name==api")(object), false);
  assert.equal(parseFieldSelector("metadata.namespace!=kube-system")(object), true);
  assert.equal(parseFieldSelector("metadata.name=web,metadata.namespace=other")(object), false);
});

Deno.test("parseFieldSelector() rejects fields the server does not index", () => {
  assert.throws(() => parseFieldSelector("spec.type=ClusterIP"), SelectorError);
});
