import assert from "node:assert/strict";
import { ConfigError } from "./config/config_error.ts";
import { ClusterFileError } from "./source/cluster_file.ts";
import { ApiConfigError } from "./source/api_connection.ts";
import { ApiUnreachableError } from "./source/api_source.ts";
import { isUserError, reportUserErrors, userErrorLine } from "./user_errors.ts";

Deno.test("isUserError() knows every error a user can cause at start, and nothing else", () => {
  assert.ok(isUserError(new ConfigError('flag --mode is "x", must be nft or iptables')));
  assert.ok(isUserError(new ClusterFileError("cannot read cluster file c.yaml", { file: "c" })));
  assert.ok(isUserError(new ApiConfigError("cannot load kubeconfig k")));
  assert.ok(isUserError(new ApiUnreachableError("the API server at http://x did not send")));
  assert.ok(
    isUserError(new Deno.errors.NotCapable('Requires sys access to "hostname", run again')),
    "a permission the image does not grant",
  );
  assert.ok(
    isUserError(
      new Error("cannot run /bin/sh: Requires run access", {
        cause: new Deno.errors.NotCapable('Requires run access to "/bin/sh"'),
      }),
    ),
    "a denied permission wrapped by the module that met it",
  );
  assert.ok(!isUserError(new Error("wrapped", { cause: new TypeError("x") })));
  assert.ok(!isUserError(new TypeError("x is undefined")));
  assert.ok(!isUserError("ConfigError"));
});

Deno.test("userErrorLine() is one line, however the message is laid out", () => {
  assert.equal(
    userErrorLine(new ConfigError("config k.yaml: not valid YAML:\n  bad indentation\n")),
    "kube-nftproxy: config k.yaml: not valid YAML: bad indentation",
  );
  const line = userErrorLine(new ConfigError(`value ${"x".repeat(5000)}`));
  assert.ok(line.length < 1100 && line.endsWith("…"));
});

Deno.test("reportUserErrors() prints a user's error as one line and exits 2", async () => {
  const lines: string[] = [];
  const code = await reportUserErrors(
    () =>
      Promise.reject(
        new ClusterFileError("cannot read cluster file c.yaml: no such file", { file: "c" }),
      ),
    (line) => lines.push(line),
  );
  assert.equal(code, 2);
  assert.deepEqual(lines, ["kube-nftproxy: cannot read cluster file c.yaml: no such file"]);
});

Deno.test("reportUserErrors() passes exit codes through and throws programming errors on", async () => {
  assert.equal(await reportUserErrors(() => Promise.resolve(3), () => {}), 3);
  await assert.rejects(
    reportUserErrors(() => Promise.reject(new TypeError("bug")), () => assert.fail("printed")),
    TypeError,
  );
});
