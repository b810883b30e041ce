import assert from "node:assert/strict";
import { aliasBomb } from "../../tests/fixtures/alias_bomb.ts";
import { readFileBounded } from "../bounded_read.ts";
import { parseClusterBytes } from "./cluster_file_parse.ts";
import type { ObjectEvent, SourceHandler } from "./events.ts";
import {
  ClusterFileError,
  FileSource,
  type FileSourceOptions,
  parseClusterFile,
} from "./file_source.ts";

const FIXTURE = new URL("../../tests/fixtures/file-source-cluster.yaml", import.meta.url);

// ---------------------------------------------------------------------------------------------
// Helpers

function service(name: string, port: number, namespace = "default"): string {
  return `apiVersion: v1
kind: Service
metadata:
  namespace: ${namespace}
  name: ${name}
spec:
  clusterIP: 10.96.0.${port % 250}
  ports:
    - port: ${port}
      protocol: TCP
`;
}

function node(name: string, ip: string): string {
  return `apiVersion: v1
kind: Node
metadata:
  name: ${name}
status:
  addresses:
    - type: InternalIP
      address: ${ip}
`;
}

function slice(name: string, serviceName: string, ip: string): string {
  return `apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  namespace: default
  name: ${name}
  labels:
    kubernetes.io/service-name: ${serviceName}
addressType: IPv4
endpoints:
  - addresses: [${ip}]
    conditions: {ready: true}
`;
}

function stream(...documents: string[]): string {
  return documents.join("---\n");
}

/** The name of an event's object, and what happened to it. */
function summary(event: ObjectEvent): string {
  const object = event.current ?? event.previous;
  const metadata = object?.metadata as { namespace?: string; name?: string };
  const what = event.previous === undefined
    ? "add"
    : event.current === undefined
    ? "delete"
    : "update";
  const namespace = metadata.namespace === undefined ? "" : `${metadata.namespace}/`;
  return `${what} ${event.kind} ${namespace}${metadata.name}`;
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/** Polls `condition` every 10 ms; fails after `timeoutMs` (never waits without bound). */
async function waitFor(what: string, condition: () => boolean, timeoutMs = 30_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!condition()) {
    if (Date.now() > deadline) {
      throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    }
    await sleep(10);
  }
}

async function withTempDir(fn: (dir: string) => Promise<void>): Promise<void> {
  const dir = await Deno.makeTempDir({ prefix: "file-source-test-" });
  try {
    await fn(dir);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
}

/**
 * Proves that no event is still owed for the changes made so far: writes the file's content
 * plus one more Service and waits for its add. Reloads run one at a time, each emitting its
 * events in one batch, so whatever an earlier reload emits comes before it; the only event
 * after the test's own must be the sentinel's (which is then forgotten).
 */
async function noMoreEvents(h: Harness, path: string): Promise<void> {
  const before = h.events.length;
  await Deno.writeTextFile(path, stream(await Deno.readTextFile(path), service("sentinel", 1)));
  await waitFor("the sentinel Service", () => h.events.length > before);
  assert.deepEqual(h.events.slice(before).map(summary), ["add Service default/sentinel"]);
  h.events.length = before;
}

/** Replaces `path` the way editors do: write a sibling file, then rename it over `path`. */
async function replaceByRename(path: string, text: string): Promise<void> {
  const temporary = `${path}.tmp-${crypto.randomUUID()}`;
  await Deno.writeTextFile(temporary, text);
  await Deno.rename(temporary, path);
}

interface Harness {
  source: FileSource;
  events: ObjectEvent[];
  logs: string[];
  synced: () => number;
  /** How many reads of the file have completed. */
  reads: () => number;
  /** Waits until the source has read the file once more (it may still be applying it). */
  nextRead: (what: string) => Promise<void>;
}

/** Starts a FileSource on `path`, recording events, onSynced calls, log lines and reads. */
async function startSource(path: string, options: FileSourceOptions = {}): Promise<Harness> {
  const events: ObjectEvent[] = [];
  const logs: string[] = [];
  let synced = 0;
  let reads = 0;
  const handler: SourceHandler = {
    onEvent: (event) => events.push(event),
    onSynced: () => synced++,
  };
  const source = new FileSource(path, {
    pollIntervalMs: 60_000,
    log: (line) => logs.push(line),
    readFile: async (p, maxBytes) => {
      const bytes = await readFileBounded(p, maxBytes);
      reads++;
      return bytes;
    },
    ...options,
  });
  await source.start(handler);
  return {
    source,
    events,
    logs,
    synced: () => synced,
    reads: () => reads,
    nextRead: async (what) => {
      const seen = reads;
      await waitFor(what, () => reads > seen);
    },
  };
}

// ---------------------------------------------------------------------------------------------
// parseClusterFile()

Deno.test("parseClusterFile() accepts every object of the fixture cluster", async () => {
  const { objects, skipped } = parseClusterFile(await Deno.readTextFile(FIXTURE));
  assert.deepEqual(skipped, []);
  assert.deepEqual([...objects.keys()], [
    "Node/node-a",
    "ServiceCIDR/kubernetes",
    "Service/default/web",
    "Service/kube-system/kube-dns",
    "EndpointSlice/default/web-abc12",
    "EndpointSlice/kube-system/kube-dns-x7k2p",
  ]);
  const nodeA = objects.get("Node/node-a")!;
  assert.equal(nodeA.kind, "Node");
  assert.deepEqual((nodeA.object.status as { addresses: unknown[] }).addresses[0], {
    type: "InternalIP",
    address: "192.168.77.1",
  });
});

Deno.test("parseClusterFile() flattens a v1 List and ignores empty documents", () => {
  const list = `apiVersion: v1
kind: List
items:
  - apiVersion: v1
    kind: Node
    metadata: {name: node-b}
  - apiVersion: v1
    kind: Service
    metadata: {namespace: default, name: api}
`;
  const { objects, skipped } = parseClusterFile(
    `---\n---\n${list}---\n# nothing\n---\n${node("node-c", "192.168.77.3")}`,
  );
  assert.deepEqual(skipped, []);
  assert.deepEqual([...objects.keys()], ["Node/node-b", "Service/default/api", "Node/node-c"]);
  assert.equal(objects.get("Service/default/api")?.kind, "Service");
});

Deno.test("parseClusterFile() accepts an empty file and a v1 List without items", () => {
  assert.equal(parseClusterFile("").objects.size, 0);
  assert.equal(parseClusterFile("# only a comment\n").objects.size, 0);
  const { objects, skipped } = parseClusterFile("apiVersion: v1\nkind: List\nitems: []\n");
  assert.equal(objects.size, 0);
  assert.deepEqual(skipped, []);
});

Deno.test("parseClusterFile() skips unknown kinds and apiVersions with one line each", () => {
  const deployment = `apiVersion: apps/v1
kind: Deployment
metadata: {namespace: default, name: web}
`;
  const oldSlice = `apiVersion: discovery.k8s.io/v1beta1
kind: EndpointSlice
metadata: {namespace: default, name: web-1}
`;
  const listItem = "apiVersion: v1\nkind: List\nitems:\n" +
    "  - {apiVersion: v1, kind: ConfigMap, metadata: {name: c}}\n";
  const { objects, skipped } = parseClusterFile(
    stream(service("web", 80), deployment, oldSlice, listItem, "just text\n", "- a\n- b\n"),
  );
  assert.deepEqual([...objects.keys()], ["Service/default/web"]);
  assert.deepEqual(skipped, [
    "skipping document 2 (apps/v1 Deployment default/web): kind not used by the proxy",
    "skipping document 3 (discovery.k8s.io/v1beta1 EndpointSlice default/web-1): apiVersion " +
    "discovery.k8s.io/v1beta1 is not supported for EndpointSlice, use discovery.k8s.io/v1",
    "skipping document 4 item 1 (v1 ConfigMap c): kind not used by the proxy",
    "skipping document 5: not a Kubernetes object but a string",
    "skipping document 6: not a Kubernetes object but a list",
  ]);
});

Deno.test("parseClusterFile() accepts networking.k8s.io/v1beta1 ServiceCIDRs", () => {
  const { objects } = parseClusterFile(
    "apiVersion: networking.k8s.io/v1beta1\nkind: ServiceCIDR\n" +
      "metadata: {name: extra}\nspec: {cidrs: [10.97.0.0/16]}\n",
  );
  assert.equal(objects.get("ServiceCIDR/extra")?.kind, "ServiceCIDR");
});

Deno.test("parseClusterFile() skips a document without metadata.name", () => {
  const { objects, skipped } = parseClusterFile(
    stream(
      "apiVersion: v1\nkind: Service\nmetadata: {namespace: default}\n",
      "apiVersion: v1\nkind: Node\n",
    ),
  );
  assert.equal(objects.size, 0);
  assert.deepEqual(skipped, [
    "skipping document 1 (v1 Service default/<no name>): metadata.name is missing or empty",
    "skipping document 2 (v1 Node <no name>): metadata is missing",
  ]);
});

Deno.test("parseClusterFile() puts a namespaced object without a namespace in default", () => {
  const { objects } = parseClusterFile("apiVersion: v1\nkind: Service\nmetadata: {name: web}\n");
  const web = objects.get("Service/default/web");
  assert.deepEqual(web?.object.metadata, { name: "web", namespace: "default" });
});

Deno.test("parseClusterFile() keeps the last of two objects with the same key and says so", () => {
  const { objects, skipped } = parseClusterFile(
    stream(service("web", 80), node("node-a", "192.168.77.1"), service("web", 8080)),
  );
  assert.deepEqual([...objects.keys()], ["Node/node-a", "Service/default/web"]);
  const spec = objects.get("Service/default/web")?.object.spec as { ports: { port: number }[] };
  assert.equal(spec.ports[0].port, 8080);
  assert.deepEqual(skipped, [
    "skipping document 1 (v1 Service default/web): " +
    "document 3 has the same key Service/default/web, the last one wins",
  ]);
});

Deno.test("parseClusterFile() throws ClusterFileError naming file, line and column", () => {
  const text = "apiVersion: v1\nkind: Node\nmetadata:\n  name: node-a\n   labels: {}\n";
  assert.throws(
    () => parseClusterFile(text, { source: "/etc/cluster.yaml" }),
    (e: unknown) => {
      assert.ok(e instanceof ClusterFileError);
      assert.equal(e.name, "ClusterFileError");
      assert.equal(e.file, "/etc/cluster.yaml");
      assert.equal(e.line, 5);
      assert.equal(e.column, 10);
      assert.match(
        e.message,
        /^cannot parse cluster file \/etc\/cluster\.yaml: line 5, column 10: /,
      );
      assert.ok(!e.message.includes("\n"), "the message is one line");
      return true;
    },
  );
});

Deno.test("parseClusterFile() treats a duplicate mapping key as a syntax error", () => {
  assert.throws(
    () => parseClusterFile("apiVersion: v1\nkind: Node\nkind: Node\n", { source: "c.yaml" }),
    (e: unknown) => e instanceof ClusterFileError && e.line === 3 && e.message.includes("c.yaml"),
  );
});

Deno.test("parseClusterFile() names the line of a syntax error in a later document", () => {
  const broken = "apiVersion: v1\nkind: Node\nmetadata:\n  name: node-b\n   labels: {}\n";
  const text = `# cluster\n---\n${node("node-a", "192.168.77.1")}--- # next\n${broken}`;
  const line = text.split("\n").findIndex((l) => l === "   labels: {}") + 1;
  assert.throws(
    () => parseClusterFile(text, { source: "c.yaml" }),
    (e: unknown) => e instanceof ClusterFileError && e.line === line && e.column === 10,
  );
});

Deno.test("parseClusterFile() reads a stream cut at its --- lines as it reads it whole", () => {
  const texts = [
    `# comments only\n\n---\n${node("a", "192.168.77.1")}---\n---\n${node("b", "192.168.77.2")}`,
    `${node("a", "192.168.77.1")}--- # a comment\n42\n---\n${node("a", "192.168.77.9")}---\n`,
    `apiVersion: v1\nkind: Node\nmetadata:\n  name: c\n  annotations:\n    note: |\n      ---\n      not a separator\n`,
    // Directives and document ends: read whole.
    `%YAML 1.2\n---\n${node("d", "192.168.77.4")}...\n---\n${node("e", "192.168.77.5")}`,
  ];
  for (const text of texts) {
    const cut = parseClusterFile(text);
    // The same stream read in one piece: "---" joined to a line the cut leaves alone.
    const whole = parseClusterFile(`%YAML 1.2\n---\n${text.replace(/^%YAML 1\.2\n---\n/, "")}`);
    assert.deepEqual([...cut.objects], [...whole.objects], text);
    assert.deepEqual(cut.skipped.length, whole.skipped.length, text);
  }
});

// ---------------------------------------------------------------------------------------------
// FileSource

Deno.test("FileSource.start() emits an add per object, then onSynced() once", async () => {
  await withTempDir(async (dir) => {
    const path = `${dir}/cluster.yaml`;
    await Deno.copyFile(FIXTURE, path);
    const h = await startSource(path);
    try {
      assert.deepEqual(h.events.map(summary), [
        "add Node node-a",
        "add ServiceCIDR kubernetes",
        "add Service default/web",
        "add Service kube-system/kube-dns",
        "add EndpointSlice default/web-abc12",
        "add EndpointSlice kube-system/kube-dns-x7k2p",
      ]);
      assert.equal(h.synced(), 1);
      assert.deepEqual(h.logs, []);
    } finally {
      await h.source.stop();
    }
  });
});

Deno.test("FileSource.start() emits the items of a v1 List", async () => {
  await withTempDir(async (dir) => {
    const path = `${dir}/cluster.yaml`;
    await Deno.writeTextFile(
      path,
      "apiVersion: v1\nkind: List\nitems:\n" +
        "  - {apiVersion: v1, kind: Service, metadata: {namespace: default, name: web}}\n" +
        "  - {apiVersion: v1, kind: Node, metadata: {name: node-a}}\n",
    );
    const h = await startSource(path);
    try {
      assert.deepEqual(h.events.map(summary), ["add Service default/web", "add Node node-a"]);
      assert.equal(h.synced(), 1);
    } finally {
      await h.source.stop();
    }
  });
});

Deno.test("FileSource.start() skips an unknown kind with one log line", async () => {
  await withTempDir(async (dir) => {
    const path = `${dir}/cluster.yaml`;
    const deployment =
      "apiVersion: apps/v1\nkind: Deployment\nmetadata: {namespace: default, name: web}\n";
    await Deno.writeTextFile(path, stream(service("web", 80), deployment));
    const h = await startSource(path);
    try {
      assert.deepEqual(h.events.map(summary), ["add Service default/web"]);
      assert.deepEqual(h.logs, [
        `${path}: skipping document 2 (apps/v1 Deployment default/web): kind not used by the proxy`,
      ]);
    } finally {
      await h.source.stop();
    }
  });
});

Deno.test("FileSource.start() throws ClusterFileError with the line of broken YAML", async () => {
  await withTempDir(async (dir) => {
    const path = `${dir}/cluster.yaml`;
    // Line 16 is indented one space too far.
    await Deno.writeTextFile(
      path,
      `${service("web", 80)}---\napiVersion: v1\nkind: Node\nmetadata:\n  name: a\n   labels: {}\n`,
    );
    const events: ObjectEvent[] = [];
    const source = new FileSource(path, { log: () => {} });
    await assert.rejects(
      source.start({ onEvent: (e) => events.push(e), onSynced: () => {} }),
      (e: unknown) =>
        e instanceof ClusterFileError && e.line === 16 && e.message.includes(path) &&
        e.message.includes("line 16"),
    );
    assert.deepEqual(events, []);
    await source.stop();
  });
});

Deno.test("FileSource.start() throws ClusterFileError when the file is missing", async () => {
  await withTempDir(async (dir) => {
    const path = `${dir}/missing.yaml`;
    const source = new FileSource(path, { log: () => {} });
    await assert.rejects(
      source.start({ onEvent: () => {}, onSynced: () => {} }),
      (e: unknown) =>
        e instanceof ClusterFileError && e.cause instanceof Deno.errors.NotFound &&
        e.message.startsWith(`cannot read cluster file ${path}: `),
    );
    await source.stop();
  });
});

Deno.test("FileSource emits update, add, delete for changed, new, removed objects", async () => {
  await withTempDir(async (dir) => {
    const path = `${dir}/cluster.yaml`;
    await Deno.writeTextFile(
      path,
      stream(
        node("node-a", "192.168.77.1"),
        service("web", 80),
        service("api", 90),
        slice("web-1", "web", "10.244.1.10"),
      ),
    );
    const h = await startSource(path);
    try {
      const addedWeb = h.events[1];
      h.events.length = 0;
      await Deno.writeTextFile(
        path,
        stream(
          node("node-a", "192.168.77.1"),
          service("web", 81),
          slice("web-1", "web", "10.244.1.10"),
          service("db", 5432),
        ),
      );
      await waitFor("three events", () => h.events.length >= 3);
      await noMoreEvents(h, path);
      assert.deepEqual(h.events.map(summary), [
        "update Service default/web",
        "add Service default/db",
        "delete Service default/api",
      ]);
      const [update, , remove] = h.events;
      assert.equal(addedWeb.current?.kind, "Service");
      assert.deepEqual(
        update.previous,
        { kind: "Service", apiVersion: "v1", metadata: { namespace: "default", name: "web" } },
        "previous names the object emitted before, without keeping its content",
      );
      assert.deepEqual((update.current?.spec as { ports: { port: number }[] }).ports[0].port, 81);
      assert.equal(remove.current, undefined);
      assert.equal(h.synced(), 1, "onSynced() is not called again");
    } finally {
      await h.source.stop();
    }
  });
});

Deno.test("FileSource emits nothing and logs the line when an edit breaks the YAML", async () => {
  await withTempDir(async (dir) => {
    const path = `${dir}/cluster.yaml`;
    await Deno.writeTextFile(path, stream(service("web", 80), service("api", 90)));
    const h = await startSource(path);
    try {
      h.events.length = 0;
      await Deno.writeTextFile(path, `${service("web", 81)}  oops: [\n`);
      // The reload that logs the parse error emits nothing; it is over once it has logged.
      await waitFor("a log line", () => h.logs.length > 0);
      assert.deepEqual(h.events, []);
      assert.equal(h.logs.length, 1);
      assert.match(
        h.logs[0],
        new RegExp(
          `^cannot parse cluster file ${path}: line 12, column 1: .*; ` +
            "keeping the 2 objects read last$",
        ),
      );
      // Fixed again: the difference is taken against the objects before the broken edit.
      await Deno.writeTextFile(path, service("web", 81));
      await waitFor("two events", () => h.events.length >= 2);
      await noMoreEvents(h, path);
      assert.deepEqual(h.events.map(summary), [
        "update Service default/web",
        "delete Service default/api",
      ]);
    } finally {
      await h.source.stop();
    }
  });
});

Deno.test("FileSource emits nothing when the file is touched or rewritten unchanged", async () => {
  await withTempDir(async (dir) => {
    const path = `${dir}/cluster.yaml`;
    const text = stream(node("node-a", "192.168.77.1"), service("web", 80));
    await Deno.writeTextFile(path, text);
    const h = await startSource(path);
    try {
      h.events.length = 0;
      const touched = h.nextRead("the re-read after a touch");
      const now = new Date();
      await Deno.utime(path, now, now);
      await touched;
      const rewritten = h.nextRead("the re-read after a rewrite");
      await replaceByRename(path, text);
      await rewritten;
      // The same objects with other key order and formatting are still the same objects.
      const reformatted = h.nextRead("the re-read after reformatting");
      await Deno.writeTextFile(
        path,
        [
          "# node first",
          "kind: Node",
          "apiVersion: v1",
          "status: {addresses: [{address: 192.168.77.1, type: InternalIP}]}",
          "metadata: {name: node-a}",
          "---",
          `{"spec": {"ports": [{"protocol": "TCP", "port": 80}], "clusterIP": "10.96.0.80"},`,
          ` "metadata": {"name": "web", "namespace": "default"}, "kind": "Service",`,
          ` "apiVersion": "v1"}`,
          "",
        ].join("\n"),
      );
      await reformatted;
      await noMoreEvents(h, path);
      assert.deepEqual(h.events, []);
      assert.deepEqual(h.logs, []);
    } finally {
      await h.source.stop();
    }
  });
});

Deno.test("FileSource notices a file replaced by rename", async () => {
  await withTempDir(async (dir) => {
    const path = `${dir}/cluster.yaml`;
    await Deno.writeTextFile(path, service("web", 80));
    // The poll is an hour away: only the directory watcher can notice the change.
    const h = await startSource(path, { pollIntervalMs: 3_600_000 });
    try {
      h.events.length = 0;
      await replaceByRename(path, stream(service("web", 80), service("api", 90)));
      await waitFor("an add", () => h.events.length >= 1);
      await noMoreEvents(h, path);
      assert.deepEqual(h.events.map(summary), ["add Service default/api"]);
    } finally {
      await h.source.stop();
    }
  });
});

Deno.test("FileSource notices a ConfigMap volume update (the ..data symlink swapped)", async () => {
  await withTempDir(async (dir) => {
    // kubelet's atomic writer layout: cluster.yaml -> ..data/cluster.yaml, ..data -> ..v1.
    await Deno.mkdir(`${dir}/..v1`);
    await Deno.writeTextFile(`${dir}/..v1/cluster.yaml`, service("web", 80));
    await Deno.symlink("..v1", `${dir}/..data`);
    await Deno.symlink("..data/cluster.yaml", `${dir}/cluster.yaml`);
    const h = await startSource(`${dir}/cluster.yaml`, { pollIntervalMs: 3_600_000 });
    try {
      assert.deepEqual(h.events.map(summary), ["add Service default/web"]);
      h.events.length = 0;
      await Deno.mkdir(`${dir}/..v2`);
      await Deno.writeTextFile(`${dir}/..v2/cluster.yaml`, service("web", 8080));
      await Deno.symlink("..v2", `${dir}/..data_tmp`);
      await Deno.rename(`${dir}/..data_tmp`, `${dir}/..data`);
      await waitFor("an update", () => h.events.length >= 1);
      assert.deepEqual(h.events.map(summary), ["update Service default/web"]);
    } finally {
      await h.source.stop();
    }
  });
});

Deno.test("FileSource polls for changes the directory watcher cannot see", async () => {
  await withTempDir(async (dir) => {
    // The watched directory holds only a symlink; the content changes elsewhere.
    await Deno.mkdir(`${dir}/watched`);
    await Deno.mkdir(`${dir}/elsewhere`);
    await Deno.writeTextFile(`${dir}/elsewhere/real.yaml`, service("web", 80));
    await Deno.symlink(`${dir}/elsewhere/real.yaml`, `${dir}/watched/cluster.yaml`);
    const h = await startSource(`${dir}/watched/cluster.yaml`, { pollIntervalMs: 50 });
    try {
      h.events.length = 0;
      await Deno.writeTextFile(`${dir}/elsewhere/real.yaml`, service("web", 8080));
      await waitFor("an update", () => h.events.length >= 1);
      assert.deepEqual(h.events.map(summary), ["update Service default/web"]);
    } finally {
      await h.source.stop();
    }
  });
});

Deno.test("FileSource keeps objects while the file is gone, diffs when it returns", async () => {
  await withTempDir(async (dir) => {
    const path = `${dir}/cluster.yaml`;
    await Deno.writeTextFile(path, stream(service("web", 80), service("api", 90)));
    const h = await startSource(path, { pollIntervalMs: 50 });
    try {
      h.events.length = 0;
      await Deno.remove(path);
      // The reload that finds the file gone logs and emits nothing; it is over once it logged.
      await waitFor("a log line", () => h.logs.length > 0);
      assert.deepEqual(h.events, []);
      assert.deepEqual(h.logs, [
        `cluster file ${path} has disappeared; keeping the 2 objects read last`,
      ]);
      await Deno.writeTextFile(path, service("web", 80));
      await waitFor("a delete", () => h.events.length >= 1);
      await noMoreEvents(h, path);
      assert.deepEqual(h.events.map(summary), ["delete Service default/api"]);
      assert.deepEqual(h.logs.slice(1), [`cluster file ${path} can be read again`]);
    } finally {
      await h.source.stop();
    }
  });
});

Deno.test("FileSource.stop() ends events, also for a change already being read", async () => {
  await withTempDir(async (dir) => {
    const path = `${dir}/cluster.yaml`;
    await Deno.writeTextFile(path, service("web", 80));
    const events: ObjectEvent[] = [];
    let reads = 0;
    // The first read after start() is held until released: a change noticed and in flight.
    let reading: () => void = () => {};
    let release: () => void = () => {};
    const read = new Promise<void>((resolve) => reading = resolve);
    const source = new FileSource(path, {
      pollIntervalMs: 60_000,
      log: () => {},
      readFile: async (p, maxBytes) => {
        reads++;
        if (reads === 2) {
          reading();
          await new Promise<void>((resolve) => release = resolve);
        }
        return await readFileBounded(p, maxBytes);
      },
    });
    await source.start({ onEvent: (e) => events.push(e), onSynced: () => {} });
    events.length = 0;
    await Deno.writeTextFile(path, stream(service("web", 80), service("api", 90)));
    await read;
    const stopped = source.stop();
    release();
    await stopped;
    assert.deepEqual(events, [], "the read that was under way emits nothing after stop()");
    // Nothing watches or polls any more (and no timer is left, or the op sanitizer fails the
    // test): a later change is never read.
    await Deno.writeTextFile(path, service("db", 5432));
    assert.equal(reads, 2);
    assert.deepEqual(events, []);
  });
});

Deno.test("FileSource rejects a pollIntervalMs that is not positive", () => {
  assert.throws(() => new FileSource("x.yaml", { pollIntervalMs: 0 }), RangeError);
});

// ---------------------------------------------------------------------------------------------
// Hostile and huge files

/** `n` Services and their EndpointSlices as a cluster file (JSON documents, ~1 KB each). */
function largeCluster(n: number): string {
  const documents: string[] = [];
  for (let i = 0; i < n; i++) {
    const ip = `10.${96 + (i >> 16)}.${(i >> 8) & 255}.${i & 255}`;
    documents.push(JSON.stringify(
      {
        apiVersion: "v1",
        kind: "Service",
        metadata: { namespace: "default", name: `svc-${i}`, labels: { app: `app-${i}` } },
        spec: { clusterIP: ip, clusterIPs: [ip], ports: [{ port: 80, protocol: "TCP" }] },
      },
      null,
      1,
    ));
    documents.push(JSON.stringify(
      {
        apiVersion: "discovery.k8s.io/v1",
        kind: "EndpointSlice",
        metadata: {
          namespace: "default",
          name: `svc-${i}-1`,
          labels: { "kubernetes.io/service-name": `svc-${i}` },
        },
        addressType: "IPv4",
        endpoints: [1, 2, 3].map((k) => ({
          addresses: [`10.244.${k}.${i & 255}`],
          conditions: { ready: true },
        })),
        ports: [{ port: 8080, protocol: "TCP" }],
      },
      null,
      1,
    ));
  }
  return documents.join("\n---\n") + "\n";
}

/**
 * Records the event loop's longest stall: a 10 ms timer that notes how late it fires.
 * `stop()` returns the worst lateness in ms.
 */
function stallProbe(): { stop(): number } {
  let last = performance.now();
  let worst = 0;
  const timer = setInterval(() => {
    const now = performance.now();
    worst = Math.max(worst, now - last - 10);
    last = now;
  }, 10);
  return {
    stop() {
      clearInterval(timer);
      return Math.max(worst, performance.now() - last - 10);
    },
  };
}

Deno.test("FileSource.start() refuses the alias bomb within 2 s with one line naming it", async () => {
  await withTempDir(async (dir) => {
    const path = `${dir}/bomb.yaml`;
    await Deno.writeTextFile(path, aliasBomb());
    // Under deno test a worker's module is type-checked the first time it starts.
    await parseClusterBytes(new Uint8Array(), { source: "", timeoutMs: 60_000, warn: () => {} });
    const source = new FileSource(path, { log: () => {} });
    const started = performance.now();
    await assert.rejects(
      source.start({ onEvent: () => {}, onSynced: () => {} }),
      (e: unknown) =>
        e instanceof ClusterFileError &&
        e.message === `cannot parse cluster file ${path}: line 9, column 42: aliases expand to ` +
            "more than 10000 values, the limit for a file of this size; write the values out " +
            "instead",
    );
    assert.ok(performance.now() - started < 2000);
    await source.stop();
  });
});

Deno.test("FileSource.start() refuses a file larger than maxBytes, naming the limit", async () => {
  await withTempDir(async (dir) => {
    const path = `${dir}/cluster.yaml`;
    await Deno.writeTextFile(path, stream(service("web", 80), service("api", 90)));
    const source = new FileSource(path, { log: () => {}, maxBytes: 100 });
    await assert.rejects(
      source.start({ onEvent: () => {}, onSynced: () => {} }),
      (e: unknown) =>
        e instanceof ClusterFileError &&
        e.message === `cannot read cluster file ${path}: larger than 100 bytes, the most a ` +
            "cluster file may hold",
    );
    await source.stop();
  });
});

Deno.test("FileSource.start() gives up on a parse that takes longer than parseTimeoutMs", async () => {
  await withTempDir(async (dir) => {
    const path = `${dir}/cluster.yaml`;
    await Deno.writeTextFile(path, largeCluster(2000));
    const source = new FileSource(path, { log: () => {}, parseTimeoutMs: 1 });
    await assert.rejects(
      source.start({ onEvent: () => {}, onSynced: () => {} }),
      (e: unknown) =>
        e instanceof ClusterFileError &&
        e.message === `cannot parse cluster file ${path}: not done after 0.001 s`,
    );
    await source.stop();
  });
});

Deno.test("FileSource.stop() ends a start that is still parsing, at once", async () => {
  await withTempDir(async (dir) => {
    const path = `${dir}/cluster.yaml`;
    await Deno.writeTextFile(path, largeCluster(5000));
    const events: ObjectEvent[] = [];
    const source = new FileSource(path, { log: () => {} });
    const starting = source.start({ onEvent: (e) => events.push(e), onSynced: () => {} });
    await sleep(50);
    const stopping = performance.now();
    await source.stop();
    await starting;
    assert.ok(performance.now() - stopping < 500, "stop() waits for no parse");
    assert.deepEqual(events, []);
  });
});

Deno.test("FileSource keeps its objects and the event loop free while a hostile file is re-read", async () => {
  await withTempDir(async (dir) => {
    const path = `${dir}/cluster.yaml`;
    await Deno.writeTextFile(path, service("web", 80));
    const h = await startSource(path, { pollIntervalMs: 50, maxBytes: 1 << 20 });
    try {
      h.events.length = 0;
      const probe = stallProbe();
      const hostile = [
        aliasBomb(),
        `${service("deep", 80)}  annotations: {a: ${"[".repeat(150)}${"]".repeat(150)}}\n`,
        "a:\n b: 1\n  c: 2\n",
        "x".repeat((1 << 20) + 1),
      ];
      for (const [i, text] of hostile.entries()) {
        await replaceByRename(path, text);
        await waitFor(`the warning about hostile file ${i + 1}`, () => h.logs.length > i);
      }
      assert.ok(probe.stop() < 1000, "the event loop never stalls for 1 s");
      assert.deepEqual(h.events, [], "the objects read last stay");
      assert.equal(h.logs.length, hostile.length, h.logs.join("\n"));
      for (const line of h.logs) assert.match(line, /objects read last$/);
      await replaceByRename(path, service("api", 90));
      await waitFor("the next good file", () => h.events.length === 2);
      assert.deepEqual(h.events.map(summary), [
        "add Service default/api",
        "delete Service default/web",
      ]);
    } finally {
      await h.source.stop();
    }
  });
});

Deno.test("FileSource takes in 20,000 objects without stalling the event loop for 1 s", async () => {
  await withTempDir(async (dir) => {
    const path = `${dir}/cluster.yaml`;
    await Deno.writeTextFile(path, largeCluster(10_000));
    let events = 0;
    const probe = stallProbe();
    const source = new FileSource(path, { log: () => {} });
    await source.start({ onEvent: () => events++, onSynced: () => {} });
    const worst = probe.stop();
    await source.stop();
    assert.equal(events, 20_000);
    assert.ok(worst < 1000, `the event loop stalled for ${Math.round(worst)} ms`);
  });
});
