/**
 * The `KubeProxyConfiguration` fields that exist upstream but have no effect in this proxy: which
 * of them a file sets, and why each is ignored. Each is type-checked as upstream does (a wrong
 * type stays an error naming the field); one set to anything but its zero value is reported, so
 * nothing a file says is dropped silently. `ipvs:` is not among them: what it means here is
 * decided where `mode: ipvs` is.
 *
 * @module
 */
import type { Fields } from "./kubeproxy_yaml.ts";

/** The fields of `winkernel:` (v1alpha1 `KubeProxyWinkernelConfiguration`). */
const WINKERNEL_FIELDS: ReadonlySet<string> = new Set([
  "networkName",
  "sourceVip",
  "enableDSR",
  "rootHnsEndpointName",
  "forwardHealthCheckVip",
]);

/** The formats of `logging.options:`, and the options of each (component-base's). */
const LOG_FORMATS: ReadonlySet<string> = new Set(["text", "json"]);
const LOG_FORMAT_OPTIONS: ReadonlySet<string> = new Set(["splitStream", "infoBufferSize"]);

/** The content types this proxy speaks to the API server: JSON only. */
const JSON_CONTENT_TYPES = new Set(["", "application/json"]);

/**
 * The fields of `top` (a whole `KubeProxyConfiguration`) that are set but have no effect here,
 * each as `field (value): why`, in the file's order of sections. Throws the field's
 * {@link ConfigError} for a wrong type or a value upstream refuses.
 *
 * @example
 * ```ts
 * unusedFields(new Fields({ enableProfiling: true }, "config", ""));
 * // ["enableProfiling (true): no /debug/pprof here (it is Go's profiler)"]
 * ```
 */
export function unusedFields(top: Fields): string[] {
  const out: string[] = [];
  const report = (field: string, value: unknown, why: string) =>
    out.push(`${field} (${typeof value === "string" ? value : JSON.stringify(value)}): ${why}`);

  const gates = top.section("featureGates");
  for (const gate of gates.keys()) {
    const on = gates.boolean(gate);
    report(
      `featureGates.${gate}`,
      on,
      "kube-nftproxy has no feature gates (it behaves as upstream with its gates at their defaults)",
    );
  }

  const client = top.section("clientConnection");
  for (const key of ["contentType", "acceptContentTypes"]) {
    const value = client.string(key);
    if (!JSON_CONTENT_TYPES.has(value)) {
      report(`clientConnection.${key}`, value, "the API server is always read as JSON");
    }
  }

  if (top.boolean("enableProfiling")) {
    report("enableProfiling", true, "no /debug/pprof here (it is Go's profiler)");
  }
  const hidden = top.string("showHiddenMetricsForVersion");
  if (hidden !== "") {
    report("showHiddenMetricsForVersion", hidden, "kube-nftproxy hides no metrics");
  }
  const configSyncPeriod = top.duration("configSyncPeriod");
  if (configSyncPeriod < 0) top.fail("configSyncPeriod", "must be greater than 0");
  if (configSyncPeriod > 0) {
    report(
      "configSyncPeriod",
      top.raw("configSyncPeriod"),
      "the watches need no periodic resync (syncPeriod forces full syncs)",
    );
  }
  const portRange = top.string("portRange");
  if (portRange !== "") {
    report("portRange", portRange, "it served the userspace mode, which upstream removed");
  }
  const winkernel = top.section("winkernel");
  winkernel.noteUnknown(WINKERNEL_FIELDS);
  for (const key of winkernel.keys()) {
    const value = winkernel.raw(key);
    if (value !== "" && value !== false && value !== null) {
      report(`winkernel.${key}`, value, "Windows only");
    }
  }
  if (top.boolean("windowsRunAsService")) report("windowsRunAsService", true, "Windows only");

  const iptables = top.section("iptables");
  if (iptables.has("localhostNodePorts") && iptables.boolean("localhostNodePorts")) {
    report(
      "iptables.localhostNodePorts",
      true,
      "node ports are never served on 127.0.0.1 here (no route_localnet)",
    );
  }

  const logging = top.section("logging");
  if (logging.has("flushFrequency")) logging.durationOrNanoseconds("flushFrequency");
  const vmodule = logging.raw("vmodule");
  if (vmodule !== undefined && vmodule !== null && vmodule !== "" && !isEmptyList(vmodule)) {
    report("logging.vmodule", vmodule, "no per-file verbosity: logging.verbosity applies to all");
  }
  const loggingOptions = logging.section("options");
  loggingOptions.noteUnknown(LOG_FORMATS);
  for (const format of loggingOptions.keys().filter((key) => LOG_FORMATS.has(key))) {
    const stream = loggingOptions.section(format);
    stream.noteUnknown(LOG_FORMAT_OPTIONS);
    if (stream.boolean("splitStream")) {
      report(`logging.options.${format}.splitStream`, true, "every line goes to stderr");
    }
    const buffer = stream.raw("infoBufferSize");
    if (buffer !== undefined && buffer !== null && buffer !== "0" && buffer !== 0) {
      report(`logging.options.${format}.infoBufferSize`, buffer, "lines are written unbuffered");
    }
  }
  return out;
}

function isEmptyList(value: unknown): boolean {
  return Array.isArray(value) && value.length === 0;
}
