/**
 * The one error type of the configuration stage: {@link ConfigError}, raised for any flag or
 * `KubeProxyConfiguration` value the proxy cannot run with, and the helper that words it.
 *
 * Messages name where the value came from and what it must be, for example
 * `config kube-proxy.yaml: iptables.masqueradeBit is 40, must be 0-31` or
 * `flag --mode is "ipvs", must be nft or iptables`.
 *
 * @module
 */

/** Options of a {@link ConfigError}: the standard `cause`, plus the offending field. */
export interface ConfigErrorOptions extends ErrorOptions {
  /**
   * Where the bad value was given, as shown at the start of the message: `config FILE: a.b`,
   * `flag --name`, or a bare field name. Default: empty (the error is not about one field).
   */
  field?: string;
}

/**
 * A configuration the proxy cannot run with: a bad flag, an unreadable or invalid
 * `KubeProxyConfiguration`, or a combination of settings that contradict each other.
 *
 * `main.ts` prints the message and exits non-zero; nothing downstream ever sees an invalid
 * {@link Config}.
 *
 * @example
 * ```ts
 * throw new ConfigError("config kube-proxy.yaml: iptables.masqueradeBit is 40, must be 0-31", {
 *   field: "config kube-proxy.yaml: iptables.masqueradeBit",
 * });
 * ```
 */
export class ConfigError extends Error {
  /** Where the bad value was given (see {@link ConfigErrorOptions.field}); may be empty. */
  readonly field: string;

  /** Builds the error; `options.cause` keeps the underlying error (YAML, I/O, parsing). */
  constructor(message: string, options: ConfigErrorOptions = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.name = "ConfigError";
    this.field = options.field ?? "";
  }
}

/**
 * Shows a configuration value the way a reader typed it: strings quoted, numbers and booleans
 * bare, lists and maps as JSON, a missing value as `missing`.
 *
 * @example
 * ```ts
 * showValue("ipvs"); // "\"ipvs\""
 * showValue(40); // "40"
 * ```
 */
export function showValue(value: unknown): string {
  if (value === undefined) return "missing";
  if (typeof value === "number" || typeof value === "boolean") return String(value);
  return JSON.stringify(value) ?? String(value);
}

/**
 * The error for one bad value: `<field> is <value>, <rule>`, where `rule` says what the value
 * must be (`"must be 0-31"`) and `cause` keeps the underlying error, if any.
 *
 * @example
 * ```ts
 * invalidValue("config kube-proxy.yaml: iptables.masqueradeBit", 40, { rule: "must be 0-31" })
 *   .message;
 * // "config kube-proxy.yaml: iptables.masqueradeBit is 40, must be 0-31"
 * ```
 */
export function invalidValue(
  field: string,
  value: unknown,
  options: { rule: string; cause?: unknown },
): ConfigError {
  return new ConfigError(`${field} is ${showValue(value)}, ${options.rule}`, {
    field,
    cause: options.cause,
  });
}
