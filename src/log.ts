/**
 * Logging in klog's shapes: one line per event, in klog's text format by default
 * (`I1124 12:04:00.123456    1234 proxy.ts:12] "msg" key="value"`) or in klog's JSON format
 * (`{"ts":…,"caller":…,"msg":…,"v":0,…}`, as `--logging-format=json`), with `-v` verbosity.
 *
 * Lines go to stderr, as klog writes text. Upstream's JSON logger writes to stdout instead; ours
 * keeps stdout for what a run prints on purpose (`--dry-run`'s script, `explain`), and container
 * runtimes collect both streams alike. Key/value pairs follow the message; an error is the `err`
 * key. The caller is this process's source file and line.
 *
 * @example
 * ```ts
 * const log = createLogger({ verbosity: 2, format: "json" });
 * log.info("serving metrics", { address: "127.0.0.1:10249" });
 * log.error("sync failed", { err: new Error("nft: exit 1") });
 * ```
 *
 * @module
 */
import type { LoggingFormat } from "./config/config.ts";

export type { LoggingFormat };

/** Key/value pairs of a structured line (klog's `keysAndValues`); `err` holds an error. */
export type LogFields = Readonly<Record<string, unknown>>;

/** A logger; `debug(level, …)` lines appear only when `-v` is at least `level`. */
export interface Logger {
  info(message: string, fields?: LogFields): void;
  warn(message: string, fields?: LogFields): void;
  error(message: string, fields?: LogFields): void;
  debug(level: number, message: string, fields?: LogFields): void;
}

/** Options of {@link createLogger}. */
export interface LoggerOptions {
  /** Upstream `-v`. Default 0. */
  verbosity?: number;
  /** klog's `text` (default) or `json`. */
  format?: LoggingFormat;
  /** Where lines go. Default: stderr. */
  write?: (line: string) => void;
  /** The time of each line. Default: now. */
  now?: () => Date;
  /** The thread id of text lines; klog's is the Go thread, ours the process id. Default: pid. */
  pid?: number;
  /** The `file:line` of the call being logged. Default: read from the stack. */
  caller?: () => string;
}

type Severity = "I" | "W" | "E";

/** Creates a logger writing klog text lines, or klog JSON lines with `format: "json"`. */
export function createLogger(options: LoggerOptions = {}): Logger {
  const verbosity = options.verbosity ?? 0;
  const json = options.format === "json";
  const write = options.write ?? ((line: string) => console.error(line));
  const now = options.now ?? (() => new Date());
  const pid = options.pid ?? Deno.pid;
  const caller = options.caller ?? callerFromStack;
  const emit = (severity: Severity, v: number, message: string, fields: LogFields = {}) => {
    const line = json
      ? jsonLine(severity, v, now(), caller(), message, fields)
      : textLine(severity, now(), pid, caller(), message, fields);
    write(line);
  };
  return {
    info: (message, fields) => emit("I", 0, message, fields),
    warn: (message, fields) => emit("W", 0, message, fields),
    error: (message, fields) => emit("E", 0, message, fields),
    debug: (level, message, fields) => {
      if (verbosity >= level) emit("I", level, message, fields);
    },
  };
}

/** klog's text header and structured body: `I1124 12:04:00.123456    1234 f.ts:12] "msg" k="v"`. */
function textLine(
  severity: Severity,
  time: Date,
  pid: number,
  caller: string,
  message: string,
  fields: LogFields,
): string {
  const two = (n: number) => String(n).padStart(2, "0");
  const stamp = `${two(time.getMonth() + 1)}${two(time.getDate())} ` +
    `${two(time.getHours())}:${two(time.getMinutes())}:${two(time.getSeconds())}.` +
    `${String(time.getMilliseconds()).padStart(3, "0")}000`;
  let line = `${severity}${stamp} ${String(pid).padStart(7)} ${caller}] ${goQuote(message)}`;
  for (const [key, value] of Object.entries(fields)) line += ` ${key}=${textValue(value)}`;
  return line;
}

/** A value as klog's text format prints it: strings and errors quoted, numbers and booleans bare. */
function textValue(value: unknown): string {
  if (typeof value === "number" || typeof value === "boolean" || typeof value === "bigint") {
    return String(value);
  }
  if (value === null || value === undefined) return "<nil>";
  if (typeof value === "string") return goQuote(value);
  if (value instanceof Error) return goQuote(value.message);
  return JSON.stringify(value) ?? goQuote(String(value));
}

/** klog's JSON line: `ts` (epoch seconds), `caller`, `msg`, `v` (not on errors), the fields. */
function jsonLine(
  severity: Severity,
  v: number,
  time: Date,
  caller: string,
  message: string,
  fields: LogFields,
): string {
  const entry: Record<string, unknown> = { ts: time.getTime() / 1000, caller, msg: message };
  if (severity !== "E") entry.v = v;
  for (const [key, value] of Object.entries(fields)) {
    entry[key] = value instanceof Error ? value.message : value === undefined ? null : value;
  }
  return JSON.stringify(entry);
}

/**
 * A string as Go's `%q` prints it: double-quoted, with `"`, `\` and control characters escaped
 * (control characters as `\xNN` where Go has no shorter escape).
 */
export function goQuote(text: string): string {
  return JSON.stringify(text)
    .replace(/\\u00([01][0-9a-fA-F])/g, (_, hex: string) => `\\x${hex.toLowerCase()}`)
    .replace(/\x7f/g, "\\x7f");
}

/** `file.ts:line` of the first stack frame outside this module. */
function callerFromStack(): string {
  const frames = new Error().stack?.split("\n") ?? [];
  for (const frame of frames.slice(1)) {
    const match = /([^/\\()\s]+):(\d+):\d+\)?\s*$/.exec(frame);
    if (match === null || match[1] === "log.ts") continue;
    return `${match[1]}:${match[2]}`;
  }
  return "???:1";
}
