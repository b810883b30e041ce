import assert from "node:assert/strict";
import { ApiConfigError, connectApi } from "./api_connection.ts";

/** A fetch that records what it was asked and answers 200 `{}`. */
function recordingFetch() {
  const calls: { url: string; headers: Headers }[] = [];
  const fake: typeof fetch = (input, init) => {
    calls.push({ url: String(input), headers: new Headers(init?.headers) });
    return Promise.resolve(new Response("{}"));
  };
  return { calls, fetch: fake };
}

async function withTempDir(fn: (dir: string) => Promise<void>): Promise<void> {
  const dir = await Deno.makeTempDir({ prefix: "api-connection-test-" });
  try {
    await fn(dir);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
}

function kubeconfigText(cluster: string, user: string): string {
  return `apiVersion: v1
kind: Config
clusters:
  - name: c
    cluster: ${cluster}
users:
  - name: u
    user: ${user}
contexts:
  - name: x
    context: {cluster: c, user: u}
current-context: x
`;
}

async function openssl(dir: string, ...args: string[]): Promise<void> {
  const { code, stderr } = await new Deno.Command("openssl", { args, cwd: dir, stderr: "piped" })
    .output();
  if (code !== 0) throw new Error(`openssl ${args[0]} failed: ${new TextDecoder().decode(stderr)}`);
}

/** A CA and a server certificate for 127.0.0.1 signed by it, as files in `dir`. */
async function makeCertificates(dir: string): Promise<void> {
  await openssl(
    dir,
    "req",
    "-x509",
    "-newkey",
    "ec",
    "-pkeyopt",
    "ec_paramgen_curve:prime256v1",
    "-nodes",
    "-keyout",
    "ca.key",
    "-out",
    "ca.crt",
    "-days",
    "2",
    "-subj",
    "/CN=test-ca",
  );
  await openssl(
    dir,
    "req",
    "-newkey",
    "ec",
    "-pkeyopt",
    "ec_paramgen_curve:prime256v1",
    "-nodes",
    "-keyout",
    "server.key",
    "-out",
    "server.csr",
    "-subj",
    "/CN=127.0.0.1",
  );
  await Deno.writeTextFile(`${dir}/san.ext`, "subjectAltName=IP:127.0.0.1\n");
  await openssl(
    dir,
    "x509",
    "-req",
    "-in",
    "server.csr",
    "-CA",
    "ca.crt",
    "-CAkey",
    "ca.key",
    "-CAcreateserial",
    "-out",
    "server.crt",
    "-days",
    "2",
    "-extfile",
    "san.ext",
  );
}

Deno.test("connectApi() sends the kubeconfig's bearer token to the --master server when both are given", async () => {
  await withTempDir(async (dir) => {
    const path = `${dir}/kubeconfig`;
    await Deno.writeTextFile(
      path,
      kubeconfigText("{server: 'http://127.0.0.1:1/'}", "{token: secret-token}"),
    );
    const recorder = recordingFetch();
    const api = await connectApi({
      kubeconfig: path,
      master: "http://127.0.0.2:8080",
      fetch: recorder.fetch,
    });
    await api.get("/api/v1/nodes?limit=1", new AbortController().signal);
    api.close();
    assert.equal(api.server, "http://127.0.0.2:8080");
    assert.equal(recorder.calls[0].url, "http://127.0.0.2:8080/api/v1/nodes?limit=1");
    assert.equal(recorder.calls[0].headers.get("authorization"), "Bearer secret-token");
    assert.equal(recorder.calls[0].headers.get("accept"), "application/json");
    assert.match(recorder.calls[0].headers.get("user-agent")!, /^kube-nftproxy\//);
  });
});

Deno.test("connectApi() sends basic auth for a kubeconfig user with username and password", async () => {
  await withTempDir(async (dir) => {
    const path = `${dir}/kubeconfig`;
    await Deno.writeTextFile(
      path,
      kubeconfigText("{server: 'http://127.0.0.1:8080'}", "{username: admin, password: pw}"),
    );
    const recorder = recordingFetch();
    const api = await connectApi({ kubeconfig: path, fetch: recorder.fetch });
    await api.get("/api", new AbortController().signal);
    api.close();
    assert.equal(recorder.calls[0].headers.get("authorization"), `Basic ${btoa("admin:pw")}`);
  });
});

Deno.test("connectApi() uses the in-cluster service account, re-reading its rotating token, when neither kubeconfig nor master is given", async () => {
  await withTempDir(async (dir) => {
    const accountDir = `${dir}/var/run/secrets/kubernetes.io/serviceaccount`;
    await Deno.mkdir(accountDir, { recursive: true });
    await makeCertificates(dir);
    await Deno.copyFile(`${dir}/ca.crt`, `${accountDir}/ca.crt`);
    await Deno.writeTextFile(`${accountDir}/token`, "pod-token");
    await Deno.writeTextFile(`${accountDir}/namespace`, "kube-system");
    const saved = ["KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT"].map((name) =>
      [name, Deno.env.get(name)] as const
    );
    Deno.env.set("KUBERNETES_SERVICE_HOST", "10.96.0.1");
    Deno.env.set("KUBERNETES_SERVICE_PORT", "443");
    try {
      const recorder = recordingFetch();
      const api = await connectApi({ inClusterPathPrefix: dir, fetch: recorder.fetch });
      await api.get("/api", new AbortController().signal);
      await Deno.writeTextFile(`${accountDir}/token`, "rotated-token");
      await api.get("/api", new AbortController().signal);
      api.close();
      assert.equal(api.server, "https://10.96.0.1:443");
      assert.equal(recorder.calls[0].headers.get("authorization"), "Bearer pod-token");
      assert.equal(recorder.calls[1].headers.get("authorization"), "Bearer rotated-token");
      Deno.env.set("KUBERNETES_SERVICE_HOST", "fd00:10:96::1");
      const v6 = await connectApi({ inClusterPathPrefix: dir, fetch: recorder.fetch });
      v6.close();
      assert.equal(v6.server, "https://[fd00:10:96::1]:443");
    } finally {
      for (const [name, value] of saved) {
        if (value === undefined) Deno.env.delete(name);
        else Deno.env.set(name, value);
      }
    }
  });
});

Deno.test("connectApi() fails with ApiConfigError outside a pod without kubeconfig or master", async () => {
  const saved = Deno.env.get("KUBERNETES_SERVICE_HOST");
  Deno.env.delete("KUBERNETES_SERVICE_HOST");
  try {
    await assert.rejects(() => connectApi({}), ApiConfigError);
  } finally {
    if (saved !== undefined) Deno.env.set("KUBERNETES_SERVICE_HOST", saved);
  }
});

Deno.test("connectApi() fails with ApiConfigError on a kubeconfig without a usable context or URL", async () => {
  await withTempDir(async (dir) => {
    const noContext = `${dir}/no-context`;
    await Deno.writeTextFile(noContext, "apiVersion: v1\nkind: Config\nclusters: []\n");
    await assert.rejects(() => connectApi({ kubeconfig: noContext }), ApiConfigError);
    await assert.rejects(() => connectApi({ master: "ftp://example" }), ApiConfigError);
  });
});

Deno.test("connectApi() trusts the kubeconfig's certificate authority and loads its client certificate", async () => {
  await withTempDir(async (dir) => {
    await makeCertificates(dir);
    const abort = new AbortController();
    const server = Deno.serve({
      hostname: "127.0.0.1",
      port: 0,
      cert: await Deno.readTextFile(`${dir}/server.crt`),
      key: await Deno.readTextFile(`${dir}/server.key`),
      signal: abort.signal,
      onListen: () => {},
    }, (request) => Response.json({ path: new URL(request.url).pathname }));
    const url = `https://127.0.0.1:${server.addr.port}`;
    try {
      const trusting = `${dir}/trusting`;
      await Deno.writeTextFile(
        trusting,
        kubeconfigText(
          `{server: '${url}', certificate-authority: ca.crt}`,
          // The server asks for no client certificate; this checks the pair loads into the client.
          "{token: t, client-certificate: server.crt, client-key: server.key}",
        ),
      );
      const api = await connectApi({ kubeconfig: trusting });
      const response = await api.get("/api", AbortSignal.timeout(5000));
      assert.deepEqual(await response.json(), { path: "/api" });
      api.close();

      const untrusting = `${dir}/untrusting`;
      await Deno.writeTextFile(untrusting, kubeconfigText(`{server: '${url}'}`, "{token: t}"));
      const stranger = await connectApi({ kubeconfig: untrusting });
      await assert.rejects(() => stranger.get("/api", AbortSignal.timeout(5000)));
      stranger.close();
    } finally {
      abort.abort();
      await server.finished;
    }
  });
});

Deno.test("connectApi() refuses a kubeconfig with an alias bomb, naming the file and line", async () => {
  await withTempDir(async (dir) => {
    const levels = [`l0: &l0 [${Array(10).fill("x").join(", ")}]`];
    for (let i = 1; i < 9; i++) levels.push(`l${i}: &l${i} [${Array(10).fill(`*l${i - 1}`)}]`);
    const path = `${dir}/kubeconfig`;
    await Deno.writeTextFile(
      path,
      `${kubeconfigText("{server: http://127.0.0.1:1}", "{}")}${levels.join("\n")}\n`,
    );
    const started = performance.now();
    await assert.rejects(
      () => connectApi({ kubeconfig: path }),
      (e: unknown) =>
        e instanceof ApiConfigError &&
        e.message.startsWith(
          `cannot load kubeconfig ${path}: aliases expand to more than 10000 values`,
        ) &&
        e.message.includes(`in "${path}" (16:`),
    );
    assert.ok(performance.now() - started < 2000);
  });
});

Deno.test("connectApi() refuses a kubeconfig larger than 4 MiB", async () => {
  await withTempDir(async (dir) => {
    const path = `${dir}/kubeconfig`;
    await Deno.writeTextFile(
      path,
      `${kubeconfigText("{server: http://127.0.0.1:1}", "{}")}#${"x".repeat(4 * 2 ** 20)}\n`,
    );
    await assert.rejects(
      () => connectApi({ kubeconfig: path }),
      (e: unknown) =>
        e instanceof ApiConfigError &&
        e.message === `cannot load kubeconfig ${path}: larger than 4 MiB`,
    );
  });
});
