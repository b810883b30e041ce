/**
 * The kubeconfig in deploy/configmap.yaml — kubeadm's own form for kube-proxy, whose user is
 * `tokenFile: /var/run/secrets/kubernetes.io/serviceaccount/token` — must make the proxy send
 * the service account's token, or every list and watch is refused as anonymous.
 *
 * `@kubernetes/client-node` 2.0.1 reads only a non-standard `token-file` key (once, at load)
 * and ignores kubeconfig's `tokenFile`; `connectApi()` reads `users[].user.tokenFile` itself,
 * per request, because projected tokens rotate.
 *
 * @module
 */
import assert from "node:assert/strict";
import { fileURLToPath } from "node:url";
import { loadAll } from "js-yaml";
import { connectApi } from "../../src/source/api_connection.ts";

const CONFIGMAP = fileURLToPath(new URL("../../deploy/configmap.yaml", import.meta.url));
const SERVICE_ACCOUNT = "/var/run/secrets/kubernetes.io/serviceaccount/";

Deno.test({
  name:
    "connectApi() sends the service account token named by the ConfigMap kubeconfig's tokenFile",

  fn: async () => {
    const [configMap] = loadAll(await Deno.readTextFile(CONFIGMAP)) as {
      data: Record<string, string>;
    }[];
    const dir = await Deno.makeTempDir({ prefix: "knp-kubeconfig-" });
    try {
      await Deno.writeTextFile(`${dir}/token`, "service-account-token");
      // Only the token matters here: plain HTTP to a fake fetch, so no CA is read.
      const kubeconfig = configMap.data["kubeconfig.conf"]
        .replaceAll(SERVICE_ACCOUNT, `${dir}/`)
        .replace(/^\s*certificate-authority:.*\n/m, "")
        .replace(/server: https:\/\/\S+/, "server: http://127.0.0.1:6443");
      await Deno.writeTextFile(`${dir}/kubeconfig.conf`, kubeconfig);
      const sent: (string | null)[] = [];
      const api = await connectApi({
        kubeconfig: `${dir}/kubeconfig.conf`,
        log: () => {},
        fetch: (_url, init) => {
          sent.push(new Headers(init?.headers).get("authorization"));
          return Promise.resolve(new Response("{}"));
        },
      });
      await api.get("/api/v1/nodes?limit=1", AbortSignal.timeout(5000));
      await Deno.writeTextFile(`${dir}/token`, "rotated-token");
      await api.get("/api/v1/nodes?limit=1", AbortSignal.timeout(5000));
      api.close();
      assert.deepEqual(sent, ["Bearer service-account-token", "Bearer rotated-token"]);
    } finally {
      await Deno.remove(dir, { recursive: true });
    }
  },
});
