/**
 * Specs of the metrics the standard "Kubernetes / Proxy" dashboard reads besides kube-proxy's own:
 * client-go's `rest_client_*` from every request the API client makes, the process metrics as Go's
 * collector reads them from /proc, and `kubernetes_build_info`.
 *
 * @module
 */
import assert from "node:assert/strict";
import { ProxyMetrics, REST_CLIENT_DURATION_BUCKETS } from "./metrics.ts";
import { parseBootTime, parseProcStat, parseResidentBytes } from "./process_metrics.ts";
import { measuredFetch, observeApiProblems, observeApiRequests } from "../source/api_http.ts";
import { connectApi } from "../source/api_connection.ts";
import { runWithPermissions } from "../../tests/run_with_permissions.ts";

/** The value of one sample line (`name{labels} value`) in an exposition, or undefined. */
function sample(text: string, series: string): number | undefined {
  const line = text.split("\n").find((l) => l.startsWith(`${series} `));
  return line === undefined ? undefined : Number(line.slice(series.length + 1));
}

Deno.test("every request of the API client counts in rest_client_requests_total and its latency", async () => {
  const server = Deno.serve(
    { hostname: "127.0.0.1", port: 0, onListen: () => {} },
    (req) => new Response("{}", { status: new URL(req.url).pathname === "/missing" ? 404 : 200 }),
  );
  const metrics = new ProxyMetrics();
  observeApiRequests((request) => metrics.apiRequest(request));
  try {
    const api = await connectApi({ master: `http://127.0.0.1:${server.addr.port}` });
    for (const path of ["/api/v1/services", "/api/v1/nodes", "/missing"]) {
      await (await api.get(path, AbortSignal.timeout(10_000))).body?.cancel();
    }
    api.close();
    const post = measuredFetch(fetch);
    await (await post(`http://127.0.0.1:${server.addr.port}/events`, { method: "POST" })).text();
    const closed = Deno.listen({ hostname: "127.0.0.1", port: 0 });
    const closedPort = (closed.addr as Deno.NetAddr).port;
    closed.close();
    await assert.rejects(() => post(`http://127.0.0.1:${closedPort}/api`));

    const text = await metrics.text();
    const host = `127.0.0.1:${server.addr.port}`;
    assert.equal(
      sample(text, `rest_client_requests_total{code="200",host="${host}",method="GET"}`),
      2,
    );
    assert.equal(
      sample(text, `rest_client_requests_total{code="404",host="${host}",method="GET"}`),
      1,
    );
    assert.equal(
      sample(text, `rest_client_requests_total{code="200",host="${host}",method="POST"}`),
      1,
    );
    assert.equal(
      sample(
        text,
        `rest_client_requests_total{code="<error>",host="127.0.0.1:${closedPort}",method="GET"}`,
      ),
      1,
      "a request without an answer counts as <error>, as client-go's",
    );
    assert.equal(
      sample(text, `rest_client_request_duration_seconds_count{host="${host}",verb="GET"}`),
      3,
    );
    assert.equal(
      sample(text, `rest_client_request_duration_seconds_count{host="${host}",verb="POST"}`),
      1,
    );
    for (const le of REST_CLIENT_DURATION_BUCKETS) {
      assert.ok(
        text.includes(
          `rest_client_request_duration_seconds_bucket{le="${le}",host="${host}",verb="GET"}`,
        ),
        `${le}`,
      );
    }
  } finally {
    observeApiRequests(undefined);
    await server.shutdown();
  }
});

Deno.test("API-source problems count by kind and reason", async () => {
  const metrics = new ProxyMetrics();
  observeApiProblems((problem) => metrics.apiProblem(problem));
  try {
    const { reportApiProblem } = await import("../source/api_http.ts");
    reportApiProblem("Service", "too_large");
    reportApiProblem("Service", "too_large");
    reportApiProblem("EndpointSlice", "wrong_kind");
    const text = await metrics.text();
    assert.equal(
      sample(text, 'kubenftproxy_api_source_problems_total{kind="Service",reason="too_large"}'),
      2,
    );
    assert.equal(
      sample(
        text,
        'kubenftproxy_api_source_problems_total{kind="EndpointSlice",reason="wrong_kind"}',
      ),
      1,
    );
  } finally {
    observeApiProblems(undefined);
  }
});

Deno.test("the process metrics agree with /proc/self as Go's collector reads it", async () => {
  // Memory is read before and after the scrape: a collection in between (this test process
  // holds what earlier tests left) may move it by more than the tolerance.
  const rssBefore = parseResidentBytes(await Deno.readTextFile("/proc/self/status"))!;
  const text = await new ProxyMetrics().text();
  const bootTime = parseBootTime(await Deno.readTextFile("/proc/stat"))!;
  const stat = parseProcStat(await Deno.readTextFile("/proc/self/stat"), bootTime)!;
  const rssAfter = parseResidentBytes(await Deno.readTextFile("/proc/self/status"))!;
  const cpu = sample(text, "process_cpu_seconds_total")!;
  assert.ok(cpu > 0 && cpu <= stat.cpuSeconds, `cpu ${cpu} s, /proc says ${stat.cpuSeconds} s`);
  assert.ok(stat.cpuSeconds - cpu < 0.5, "read at the scrape, every thread counted");
  const resident = sample(text, "process_resident_memory_bytes")!;
  assert.ok(
    resident >= Math.min(rssBefore, rssAfter) * 0.8 &&
      resident <= Math.max(rssBefore, rssAfter) * 1.2,
    `rss ${resident} B, /proc says ${rssBefore} B before and ${rssAfter} B after`,
  );
  const virtual = sample(text, "process_virtual_memory_bytes")!;
  assert.ok(Math.abs(virtual - stat.virtualBytes) / stat.virtualBytes < 0.2);
  const started = sample(text, "process_start_time_seconds")!;
  // The kernel's start: before the runtime's time origin (type checking comes first), recent.
  const origin = (Date.now() - performance.now()) / 1000;
  assert.ok(
    started <= origin + 0.1 && started > origin - 300,
    `start ${started}, origin ${origin}`,
  );
  assert.equal(started, stat.startTimeSeconds);
  const fds = [...Deno.readDirSync("/proc/self/fd")].length;
  assert.ok(Math.abs(sample(text, "process_open_fds")! - fds) <= 3);
  const limit = /^Max open files\s+(\d+)/m.exec(await Deno.readTextFile("/proc/self/limits"))!;
  assert.equal(sample(text, "process_max_fds"), Number(limit[1]));
  for (const name of ["process_heap_bytes", "nodejs_version_info"]) {
    assert.ok(!text.includes(name), `${name}: not Go's, not exposed`);
  }
});

Deno.test("without access to /proc (the image's permissions) the dashboard's CPU and memory still come from the kernel, and what only /proc knows is left out", async () => {
  // A process that worked ~0.3 s of CPU, with the image's kind of permissions: none for /proc.
  const code = `import { ProxyMetrics } from ${
    JSON.stringify(new URL("./metrics.ts", import.meta.url).href)
  };
    const until = performance.now() + 300;
    while (performance.now() < until) {}
    console.log(await new ProxyMetrics().text());`;
  const out = await runWithPermissions(code, ["--allow-read=/tmp", "--allow-env"]);
  const text = out.stdout;
  assert.ok(out.success, out.stderr);
  const cpu = sample(text, "process_cpu_seconds_total")!;
  assert.ok(cpu >= 0.25 && cpu < 5, `cpu ${cpu} s`);
  const resident = sample(text, "process_resident_memory_bytes")!;
  assert.ok(resident > 10 * 2 ** 20 && resident < 2 ** 30, `rss ${resident} B`);
  const started = sample(text, "process_start_time_seconds")!;
  assert.ok(Math.abs(started - Date.now() / 1000) < 60, `start ${started}`);
  for (const name of ["process_virtual_memory_bytes", "process_open_fds", "process_max_fds"]) {
    assert.ok(!text.includes(name), `${name}: absent, not 0`);
  }
});

Deno.test("kubernetes_build_info is 1 with the version and the runtime", async () => {
  const text = await new ProxyMetrics().text();
  const line = text.split("\n").find((l) => l.startsWith("kubernetes_build_info{"))!;
  assert.match(line, /git_version="v\d+\.\d+\.\d+"/);
  assert.match(line, /go_version="deno\d/);
  assert.match(line, /platform="linux\/(amd64|arm64)"/);
  assert.match(line, /\} 1$/);
});

Deno.test("parseProcStat() reads times, start and size, whatever the command name holds", () => {
  const fields = Array.from({ length: 50 }, (_, i) => String(i + 3));
  fields[14 - 3] = "150"; // utime
  fields[15 - 3] = "50"; // stime
  fields[22 - 3] = "12345"; // starttime, ticks after boot
  fields[23 - 3] = "4096000"; // vsize
  const stat = parseProcStat(`42 (a) b (c) ${fields.join(" ")}`, 1_000_000);
  assert.deepEqual(stat, {
    cpuSeconds: 2,
    startTimeSeconds: 1_000_123.45,
    virtualBytes: 4096000,
  });
  assert.equal(parseProcStat("garbage", 0), undefined);
  assert.equal(parseResidentBytes("VmRSS:\t   61368 kB\n"), 61368 * 1024);
  assert.equal(parseBootTime("cpu 1 2\nbtime 1795600000\n"), 1795600000);
});
