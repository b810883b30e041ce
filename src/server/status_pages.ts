/**
 * The metrics server's debugging pages, as upstream's current release serves them: `/configz`
 * (the effective configuration as JSON under `kubeproxy.config.k8s.io`), `/flagz` (the flags the
 * process was started with) and `/statusz` (start time, uptime, runtime and binary version,
 * paths). Pure: every input is given.
 *
 * @module
 */
import { load } from "js-yaml";
import type { Config } from "../config/config.ts";
import { toKubeProxyConfiguration } from "../config/kubeproxy_config.ts";
import { VERSION } from "../version.ts";

/** What the pages show. */
export interface StatusPagesInput {
  /** The effective configuration. */
  readonly config: Config;
  /** The command line after the program name. */
  readonly argv: readonly string[];
  /** When the process started, ms since the epoch. */
  readonly startedAt: number;
}

/** The paths the metrics server answers, listed by `/statusz`. */
export const METRICS_SERVER_PATHS = [
  "/configz",
  "/flagz",
  "/healthz",
  "/healthz/ping",
  "/metrics",
  "/proxyMode",
  "/statusz",
];

const WARNING = "Warning: This endpoint is not meant to be machine parseable, has no formatting " +
  "compatibility guarantees and is for debugging purposes only.";

/** `/configz`'s body: `{"kubeproxy.config.k8s.io": {…KubeProxyConfiguration fields…}}`. */
export function configzBody(config: Config): string {
  const document = load(toKubeProxyConfiguration(config)) as Record<string, unknown>;
  const { apiVersion: _apiVersion, kind: _kind, ...fields } = document;
  return JSON.stringify({ "kubeproxy.config.k8s.io": fields });
}

/**
 * `/flagz`'s body: one `name=value` line per flag given (`true` for a bare boolean flag), sorted
 * by name as upstream's.
 */
export function flagzBody(argv: readonly string[]): string {
  const lines: string[] = [];
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i];
    if (!arg.startsWith("-")) continue;
    const flag = arg.replace(/^--?/, "");
    const eq = flag.indexOf("=");
    if (eq >= 0) lines.push(`${flag.slice(0, eq)}=${flag.slice(eq + 1)}`);
    else if (i + 1 < argv.length && !argv[i + 1].startsWith("-")) {
      lines.push(`${flag}=${argv[++i]}`);
    } else lines.push(`${flag}=true`);
  }
  return `kube-proxy flags\n${WARNING}\n\n${lines.sort().join("\n")}\n`;
}

/** `/statusz`'s body at `now` (ms since the epoch). */
export function statuszBody(input: StatusPagesInput, now: number): string {
  const up = Math.max(0, Math.floor((now - input.startedAt) / 1000));
  const two = (n: number) => String(n).padStart(2, "0");
  const uptime = `${Math.floor(up / 3600)} hr ${two(Math.floor(up / 60) % 60)} min ${
    two(up % 60)
  } sec`;
  return [
    "kube-proxy statusz",
    WARNING,
    "",
    `Started: ${unixDate(new Date(input.startedAt))}`,
    `Up: ${uptime}`,
    `Go version: deno ${Deno.version.deno} (V8 ${Deno.version.v8})`,
    `Binary version: kube-nftproxy ${VERSION}`,
    `Paths: ${METRICS_SERVER_PATHS.join(" ")}`,
    "",
  ].join("\n");
}

/** Go's `time.UnixDate` in UTC, as upstream prints the start: `Wed Nov  5 22:21:56 UTC 2026`. */
export function unixDate(time: Date): string {
  const [weekday, , month, , clock] = time.toUTCString().replace(",", "").split(" ");
  const day = String(time.getUTCDate()).padStart(2, " ");
  return `${weekday} ${month} ${day} ${clock} UTC ${time.getUTCFullYear()}`;
}
