/**
 * Property: no input of any size or shape stalls or crashes the proxy. Hostile documents —
 * alias bombs and self-referring aliases, nesting beyond the limit, huge strings and numbers,
 * wrong types at every field, duplicate keys, odd tags, broken syntax, invalid UTF-8 and NUL
 * bytes — go through the real {@link FileSource} (a cluster file) and through the real
 * {@link ApiSource} against the test API server (raw lines injected into its watch streams).
 * For every case: no error but the ones a user is told about (ClusterFileError), nothing over
 * 2 s, the other objects keep flowing, and every script the proxy renders from what it took in
 * is accepted by `nft -c` in a throwaway namespace.
 *
 * @module
 */
import assert from "node:assert/strict";
import fc from "fast-check";
import { dump } from "js-yaml";
import { checkNft } from "../../src/apply/nft.ts";
import type { ObjectEvent, RawObject } from "../../src/source/events.ts";
import { ApiSource } from "../../src/source/api_source.ts";
import { ClusterFileError, FileSource } from "../../src/source/file_source.ts";
import { TestApiServer } from "../apiserver/server.ts";
import { endpointSlice, node, service } from "../fixtures/objects.ts";
import { kernelGate, withScratch } from "../nft_scratch.ts";
import { clusterObject, type ConfigVariant, configVariant } from "./arbitraries.ts";
import { assertClean, propertyRuns, propertySeed, SimulatedProxy } from "./cluster.ts";

/** Longest one case may take: anything longer is a hang. */
const HANG_MS = 2000;

/** Cluster-file cases run at once (each FileSource parses in a worker of its own). */
const PARALLEL_CASES = 4;

// ---------------------------------------------------------------------------------------------
// Hostile YAML

/** `n` copies of `item`, comma-separated. */
const times = (n: number, item: string) => Array(n).fill(item).join(", ");

/** A flow value that is trouble: what a field of an object holds in a hostile file. */
const hostileValue: fc.Arbitrary<string> = fc.oneof(
  // Alias bombs of every size, and aliases that refer to themselves or to nothing.
  fc.record({ levels: fc.integer({ min: 2, max: 12 }), fanout: fc.integer({ min: 2, max: 12 }) })
    .map(({ levels, fanout }) => {
      const parts = [`&a0 [${times(fanout, "lol")}]`];
      for (let i = 1; i < levels; i++) parts.push(`&a${i} [${times(fanout, `*a${i - 1}`)}]`);
      return `[${parts.join(", ")}]`;
    }),
  fc.constantFrom("&r [*r]", "&m {a: *m}", "*nowhere", "[&x 1, *x, *x]"),
  // Nesting around the limit, flow or block.
  fc.integer({ min: 90, max: 400 }).map((n) => `${"[".repeat(n)}${"]".repeat(n)}`),
  fc.integer({ min: 90, max: 200 }).map((n) => `${"{a: ".repeat(n)}1${"}".repeat(n)}`),
  // Huge strings and numbers.
  fc.integer({ min: 1000, max: 300_000 }).map((n) => `"${"x".repeat(n)}"`),
  fc.constantFrom(
    "1e400",
    "-1e400",
    "123456789012345678901234567890",
    "0x7fffffffffffffffffff",
    ".nan",
    "-.inf",
    "0o777777777777777777777",
    "9007199254740993",
  ),
  // Duplicate keys, tags, merge keys.
  fc.constantFrom(
    "{a: 1, a: 2}",
    "{port: 80, port: 81}",
    "!!binary aGVsbG8=",
    "!!set {a, b}",
    "!!omap [a: 1]",
    "!custom 1",
    "!!timestamp 2001-12-14",
    "{<<: {a: 1}}",
    "!!str 80",
    "!!int '80'",
    "!<tag:yaml.org,2002:seq> x",
  ),
  // Broken syntax.
  fc.constantFrom('"unterminated', "[1, 2", "{a: ", "'x''", "- a\n - b", "\t80", "@x", "`x`"),
);

/** A hostile value placed in one field of an otherwise usable Service or EndpointSlice. */
const hostileObject: fc.Arbitrary<string> = fc.record({
  value: hostileValue,
  field: fc.constantFrom(
    "name",
    "namespace",
    "clusterIP",
    "ports",
    "port",
    "annotation",
    "addresses",
  ),
  slice: fc.boolean(),
}).map(({ value, field, slice }) => {
  const v = (f: string, fallback: string) => (field === f ? value : fallback);
  if (slice) {
    return "apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\n" +
      `metadata: {name: ${v("name", "s1")}, namespace: ${v("namespace", "default")}, ` +
      `labels: {kubernetes.io/service-name: web}, annotations: {a: ${v("annotation", "b")}}}\n` +
      `addressType: IPv4\nendpoints: [{addresses: ${v("addresses", "[10.244.1.5]")}}]\n` +
      `ports: [{port: ${v("port", "8080")}}]\n`;
  }
  return "apiVersion: v1\nkind: Service\n" +
    `metadata: {name: ${v("name", "web")}, namespace: ${v("namespace", "default")}, ` +
    `annotations: {a: ${v("annotation", "b")}}}\n` +
    `spec: {clusterIP: ${v("clusterIP", "10.96.0.10")}, ports: ${
      v("ports", `[{port: ${v("port", "80")}}]`)
    }}\n`;
});

/** An object the model must judge (wrong types anywhere), written as YAML or as JSON. */
const judgedObject: fc.Arbitrary<string> = fc.tuple(clusterObject, fc.boolean()).map(
  ([{ object }, block]) => {
    if (block) {
      try {
        return dump(object);
      } catch {
        // Values js-yaml cannot write (NaN in a key, …): JSON is YAML too.
      }
    }
    return `${JSON.stringify(object)}\n`;
  },
);

/** One document of a hostile cluster file. */
const hostileDocument: fc.Arbitrary<string> = fc.oneof(
  { weight: 10, arbitrary: judgedObject },
  { weight: 3, arbitrary: hostileObject },
  { weight: 1, arbitrary: fc.string({ maxLength: 200 }) },
  { weight: 1, arbitrary: fc.constantFrom("%YAML 1.1\n", "...\n", "%TAG ! tag:x,2000:\n", "") },
);

/** Bytes that break text: invalid UTF-8, NUL, a lone surrogate's encoding, a BOM. */
const badBytes = fc.constantFrom(
  [0xff],
  [0xc3],
  [0xed, 0xa0, 0x80],
  [0x00],
  [0xef, 0xbb, 0xbf],
  [0xf8, 0x88, 0x80, 0x80, 0x80],
);

/** A hostile cluster file: documents, separators, and now and then bytes that break text. */
const hostileFile: fc.Arbitrary<Uint8Array> = fc.record({
  documents: fc.array(
    fc.tuple(hostileDocument, fc.constantFrom("---\n", "--- # c\n", "\n---\n", "--- x\n")),
    { minLength: 1, maxLength: 6 },
  ),
  damage: fc.oneof(
    { weight: 3, arbitrary: fc.constant([]) },
    { weight: 1, arbitrary: fc.array(fc.tuple(fc.nat(), badBytes), { maxLength: 2 }) },
  ),
}).map(({ documents, damage }) => {
  const text = documents.map(([document, separator], i) =>
    i === 0 ? document : separator + document
  )
    .join("");
  let bytes = [...new TextEncoder().encode(text)];
  for (const [at, insert] of damage) {
    const i = bytes.length === 0 ? 0 : at % bytes.length;
    bytes = [...bytes.slice(0, i), ...insert, ...bytes.slice(i)];
  }
  return new Uint8Array(bytes);
});

// ---------------------------------------------------------------------------------------------
// Hostile watch lines

/** A watch line that is trouble (without its newline). */
const hostileLine: fc.Arbitrary<string | Uint8Array> = fc.oneof(
  // Events whose objects the model must judge, of the watched kind or another.
  fc.record({
    type: fc.constantFrom("ADDED", "MODIFIED", "DELETED", "BOOKMARK", "ERROR", "Weird", 5, null),
    object: clusterObject,
    kind: fc.constantFrom(undefined, "Pod", 7),
  }).map(({ type, object, kind }) => {
    const o: RawObject = { ...object.object };
    if (kind !== undefined) o.kind = kind;
    // A lying server's versions are not what this property is about (the watch would wait for
    // a version that never comes): versions are dropped, or garbled so that the server refuses them.
    const metadata = o.metadata;
    if (typeof metadata === "object" && metadata !== null && !Array.isArray(metadata)) {
      const { resourceVersion: _, ...rest } = metadata as RawObject;
      o.metadata = rest;
    }
    return JSON.stringify({ type, object: o });
  }),
  fc.constantFrom("abc", "-1", "1.5").map((rv) =>
    JSON.stringify({
      type: "BOOKMARK",
      object: { kind: "Service", metadata: { resourceVersion: rv } },
    })
  ),
  fc.constantFrom(400, 404, 410, 500, 0).map((code) =>
    JSON.stringify({ type: "ERROR", object: { kind: "Status", code, reason: "Injected" } })
  ),
  // Not events: garbage, truncated JSON, a line too long, deep nesting, huge numbers, dup keys.
  fc.string({ maxLength: 300 }),
  fc.nat({ max: 60 }).map((n) =>
    JSON.stringify({ type: "ADDED", object: service({ name: "cut", clusterIPs: ["10.96.0.7"] }) })
      .slice(0, n)
  ),
  fc.constant(`{"type":"ADDED","object":{"a":"${"x".repeat(70_000)}"}}`),
  fc.integer({ min: 1000, max: 200_000 }).map((n) =>
    `{"type":"ADDED","object":{"metadata":{"name":"deep","namespace":"default"},"spec":${
      "[".repeat(n)
    }${"]".repeat(n)}}}`
  ),
  fc.constant(
    '{"type":"ADDED","object":{"metadata":{"name":"n","namespace":"default"},' +
      '"spec":{"ports":[{"port":1e400},{"port":123456789012345678901234567890}]}}}',
  ),
  fc.constant('{"type":"ADDED","type":"DELETED","object":{"metadata":{"name":"d","name":"e"}}}'),
  badBytes.map((bytes) => new Uint8Array(bytes)),
);

// ---------------------------------------------------------------------------------------------
// Kernel check of the rendered scripts

/** Scripts to check, many per `nft -c` run; `failures` gets the index of each one refused. */
class ScriptChecker {
  readonly failures: { index: number; error: string }[] = [];
  #batch: { index: number; script: string }[] = [];
  #bytes = 0;
  runs = 0;

  constructor(private readonly ns: string) {}

  async add(index: number, script: string): Promise<void> {
    if (script === "") return;
    this.#batch.push({ index, script });
    this.#bytes += script.length;
    if (this.#batch.length >= 150 || this.#bytes >= 4_000_000) await this.flush();
  }

  async flush(): Promise<void> {
    const check = async (items: { index: number; script: string }[]): Promise<void> => {
      this.runs++;
      try {
        await checkNft(items.map((b) => b.script).join(""), { netns: this.ns });
      } catch (err) {
        if (items.length === 1) {
          this.failures.push({ index: items[0].index, error: (err as Error).message });
          return;
        }
        const half = Math.ceil(items.length / 2);
        await check(items.slice(0, half));
        await check(items.slice(half));
      }
    };
    if (this.#batch.length > 0) await check(this.#batch);
    this.#batch = [];
    this.#bytes = 0;
  }
}

/**
 * The strings of an object a script could leak (names, namespaces, labels, port names): those
 * at most four levels down, shorter than 300 characters. The hostile ones (deep, huge) never
 * reach a script as names, and walking them whole is what this property is about not doing.
 */
function namesIn(object: RawObject, into: Set<string>): void {
  const stack: [unknown, number][] = [[object, 0]];
  while (stack.length > 0) {
    const [node, depth] = stack.pop()!;
    if (typeof node === "string") {
      if (node.length < 300) into.add(node);
    } else if (depth < 4 && typeof node === "object" && node !== null) {
      for (const [key, value] of Object.entries(node).slice(0, 100)) {
        if (key.length < 300) into.add(key);
        stack.push([value, depth + 1]);
      }
    }
  }
}

/** A proxy whose every event must be taken without throwing; `crashes` collects what threw. */
function guardedProxy(config: ConfigVariant, table: string, crashes: string[]) {
  const proxy = new SimulatedProxy(config, table);
  const names = new Set<string>();
  let events = 0;
  return {
    proxy,
    events: () => events,
    onEvent(event: ObjectEvent) {
      events++;
      for (const object of [event.previous, event.current]) if (object) namesIn(object, names);
      try {
        proxy.onEvent(event);
      } catch (err) {
        crashes.push(`${table}: the model threw on an event: ${(err as Error).stack}`);
      }
    },
    sync(full: boolean): string {
      try {
        const script = proxy.sync({ full });
        assertClean(script, { tables: [table], names: [...names], tolerateKnown: true });
        return script;
      } catch (err) {
        crashes.push(`${table}: rendering failed: ${(err as Error).stack}`);
        return "";
      }
    },
  };
}

function report(what: string, failures: readonly string[]): string {
  return `${failures.length} ${what}:\n${failures.slice(0, 5).join("\n\n").slice(0, 5000)}`;
}

// ---------------------------------------------------------------------------------------------
// The properties

Deno.test({
  name:
    "FileSource takes any hostile cluster file within 2 s, as objects or as one ClusterFileError, and renders only scripts nft accepts",
  ignore: kernelGate.ignore,
  fn: async () => {
    const runs = propertyRuns();
    const seed = propertySeed();
    const cases = fc.sample(fc.tuple(hostileFile, configVariant), { seed, numRuns: runs });
    const crashes: string[] = [];
    const hangs: string[] = [];
    let refused = 0;
    let objects = 0;
    const started = performance.now();
    const dir = await Deno.makeTempDir({ prefix: "knp-hostile-" });
    try {
      await withScratch(async (k) => {
        const checker = new ScriptChecker(k.ns);
        /** One case: the file read by a FileSource of its own, its objects synced in full. */
        const runCase = async (index: number, bytes: Uint8Array, config: ConfigVariant) => {
          const path = `${dir}/cluster-${index}.yaml`;
          await Deno.writeFile(path, bytes);
          const table = `h${index}`;
          const proxy = guardedProxy(config, table, crashes);
          const source = new FileSource(path, { log: () => {}, pollIntervalMs: 3_600_000 });
          const caseStarted = performance.now();
          let script = "";
          try {
            await source.start({ onEvent: (e) => proxy.onEvent(e), onSynced: () => {} });
            objects += proxy.events();
            script = proxy.sync(true);
          } catch (err) {
            if (err instanceof ClusterFileError) refused++;
            else crashes.push(`case ${index}: ${(err as Error).stack}`);
          } finally {
            await source.stop();
            await Deno.remove(path);
          }
          const ms = performance.now() - caseStarted;
          if (ms > HANG_MS) hangs.push(`case ${index}: ${Math.round(ms)} ms`);
          return script;
        };
        // A few at a time, as a node's cores allow: each parse runs in its own worker.
        for (let first = 0; first < cases.length; first += PARALLEL_CASES) {
          const batch = cases.slice(first, first + PARALLEL_CASES);
          const scripts = await Promise.all(
            batch.map(([bytes, config], i) => runCase(first + i, bytes, config)),
          );
          for (const [i, script] of scripts.entries()) await checker.add(first + i, script);
        }
        await checker.flush();
        const seconds = ((performance.now() - started) / 1000).toFixed(1);
        console.log(
          `hostile files: ${runs} cases (PROPERTY_SEED=${seed}), ${refused} refused as ` +
            `ClusterFileError, ${objects} objects taken, ${crashes.length} crashes, ` +
            `${hangs.length} hangs, ${checker.failures.length} scripts refused by nft ` +
            `(${checker.runs} nft runs), ${seconds} s`,
        );
        assert.deepEqual(crashes, [], report("crashes", crashes));
        assert.deepEqual(hangs, [], report("cases over 2 s", hangs));
        assert.deepEqual(
          checker.failures,
          [],
          report(
            "scripts refused by nft",
            checker.failures.map((f) => `case ${f.index}: ${f.error}`),
          ),
        );
      });
    } finally {
      await Deno.remove(dir, { recursive: true });
    }
  },
});

/**
 * A fetch that hands the test API server's answers through, keeping each open watch stream so
 * that {@link inject} can slip raw bytes into it between two of the server's events.
 */
function injectingFetch() {
  const streams = new Set<ReadableStreamDefaultController<Uint8Array>>();
  const wrapped: typeof fetch = async (input, init) => {
    const response = await fetch(input, init);
    if (!String(input).includes("watch=1") || response.body === null) return response;
    const reader = response.body.getReader();
    let controller!: ReadableStreamDefaultController<Uint8Array>;
    const body = new ReadableStream<Uint8Array>({
      start(c) {
        controller = c;
        streams.add(c);
      },
      async pull(c) {
        try {
          const { done, value } = await reader.read();
          if (done) {
            streams.delete(c);
            c.close();
          } else c.enqueue(value);
        } catch (err) {
          streams.delete(c);
          c.error(err);
        }
      },
      cancel(reason) {
        streams.delete(controller);
        // Not awaited: the consumer's cancel must not wait on the server's stream.
        reader.cancel(reason).catch(() => {});
      },
    });
    return new Response(body, { status: response.status, headers: response.headers });
  };
  return {
    fetch: wrapped,
    /** Writes `lines` (each then a newline) into every open watch stream; false if none is open. */
    inject(lines: readonly (string | Uint8Array)[]): boolean {
      if (streams.size === 0) return false;
      const encoder = new TextEncoder();
      for (const c of streams) {
        for (const line of lines) {
          c.enqueue(typeof line === "string" ? encoder.encode(line) : line);
          c.enqueue(encoder.encode("\n"));
        }
      }
      return true;
    },
  };
}

Deno.test({
  name:
    "ApiSource survives any hostile watch line within 2 s, keeps the other objects flowing, and renders only scripts nft accepts",
  ignore: kernelGate.ignore,
  fn: async () => {
    const runs = propertyRuns();
    const seed = propertySeed();
    const cases = fc.sample(fc.array(hostileLine, { minLength: 1, maxLength: 4 }), {
      seed,
      numRuns: runs,
    });
    const crashes: string[] = [];
    const hangs: string[] = [];
    const started = performance.now();
    await using server = await TestApiServer.start({ bookmarkIntervalMs: 100 });
    server.create("Node", node("node-a", { ips: ["192.168.50.2"] }));
    server.create("Service", service({ name: "keep", clusterIPs: ["10.96.0.5"] }));
    server.create(
      "EndpointSlice",
      endpointSlice({ name: "keep-1", service: "keep", endpoints: ["10.244.1.5"] }),
    );
    const tap = injectingFetch();
    const [config] = fc.sample(configVariant, { seed, numRuns: 1 });
    const table = "hapi";
    const proxy = guardedProxy(config, table, crashes);
    let synced = false;
    let logged = 0;
    const source = new ApiSource({
      master: server.url,
      hostname: "node-a",
      log: () => logged++,
      fetch: tap.fetch,
      backoff: { initialMs: 1, maxMs: 20 },
      maxEventBytes: 64 * 1024,
    });
    await source.start({ onEvent: (e) => proxy.onEvent(e), onSynced: () => synced = true });
    try {
      await withScratch(async (k) => {
        /** Each sync's script is applied as the daemon would: partial ones on top of the last. */
        const refused: string[] = [];
        let applied = 0;
        const apply = async (index: number, script: string) => {
          if (script === "" || refused.length > 0) return;
          try {
            await k.load(script);
            applied++;
          } catch (err) {
            refused.push(`case ${index}: ${(err as Error).message}`);
          }
        };
        const deadline = Date.now() + 10_000;
        while (!synced && Date.now() < deadline) await new Promise((r) => setTimeout(r, 10));
        assert.ok(synced, "the initial sync");
        for (const [index, lines] of cases.entries()) {
          const caseStarted = performance.now();
          // Into whatever watch streams are open (after a relist there may be none for a moment).
          while (!tap.inject(lines) && performance.now() - caseStarted < HANG_MS) {
            await new Promise((r) => setTimeout(r, 2));
          }
          // The server's next change must still arrive: the source recovered, whatever it took.
          const name = `marker-${index}`;
          server.create("Service", service({ name, clusterIPs: ["10.96.0.6"] }));
          const has = () => source.store("Service").has(`Service/default/${name}`);
          while (!has() && performance.now() - caseStarted < HANG_MS) {
            await new Promise((r) => setTimeout(r, 1));
          }
          if (!has()) hangs.push(`case ${index}: ${JSON.stringify(lines).slice(0, 300)}`);
          server.delete("Service", { namespace: "default", name });
          await apply(index, proxy.sync(index % 50 === 0));
          if (hangs.length > 5) break;
        }
        assert.ok(source.store("Service").has("Service/default/keep"), "the other Service stays");
        assert.ok(source.store("EndpointSlice").has("EndpointSlice/default/keep-1"));
        const seconds = ((performance.now() - started) / 1000).toFixed(1);
        console.log(
          `hostile watch lines: ${runs} cases (PROPERTY_SEED=${seed}), ${crashes.length} ` +
            `crashes, ${hangs.length} hangs, ${proxy.events()} events taken, ${logged} lines ` +
            `logged, ${applied} scripts applied, ${refused.length} refused by nft, ${seconds} s`,
        );
        assert.deepEqual(crashes, [], report("crashes", crashes));
        assert.deepEqual(hangs, [], report("cases over 2 s", hangs));
        assert.deepEqual(refused, [], report("scripts refused by nft", refused));
      });
    } finally {
      // Bounded, so that a stop that never ends fails here instead of holding the suite.
      await withinMs(source.stop(), 15_000, "ApiSource.stop() after the hostile lines");
    }
  },
});

/** `promise`, or an Error naming `what` once `ms` have passed without it settling. */
async function withinMs<T>(promise: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what} did not end within ${ms} ms`)), ms);
  });
  try {
    return await Promise.race([promise, late]);
  } finally {
    clearTimeout(timer);
  }
}
