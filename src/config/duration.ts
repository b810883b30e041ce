/**
 * Go duration strings (`30s`, `1m0s`, `500ms`, `1h2m3.5s`), as kube-proxy's flags and
 * `metav1.Duration` fields spell them: parsing into milliseconds and formatting back.
 *
 * Parsing follows Go's `time.ParseDuration` (sign, decimal fractions, units `ns`, `us`, `µs`,
 * `μs`, `ms`, `s`, `m`, `h`, a bare `0`, and its error texts); formatting follows Go's
 * `Duration.String`, so a value written by {@link formatGoDuration} reads back unchanged.
 *
 * @module
 */

/** Nanoseconds per unit, as Go's `time` package spells them. */
const UNIT_NS: ReadonlyMap<string, bigint> = new Map([
  ["ns", 1n],
  ["us", 1_000n],
  ["µs", 1_000n], // U+00B5 micro sign
  ["μs", 1_000n], // U+03BC Greek small letter mu
  ["ms", 1_000_000n],
  ["s", 1_000_000_000n],
  ["m", 60_000_000_000n],
  ["h", 3_600_000_000_000n],
]);

/** Go's `time.Duration` is an int64 of nanoseconds. */
const MAX_NS = (1n << 63n) - 1n;

const NS_PER_MS = 1_000_000n;

/**
 * Parses a Go duration string into milliseconds (possibly fractional: `1500us` is 1.5).
 *
 * Throws a `SyntaxError` carrying Go's own message (`time: invalid duration "abc"`,
 * `time: missing unit in duration "30"`, `time: unknown unit "d" in duration "1d"`) for
 * anything Go rejects, including the empty string and values beyond Go's ±292 years.
 *
 * @example
 * ```ts
 * parseGoDuration("1m0s"); // 60000
 * parseGoDuration("1h2m3.5s"); // 3723500
 * parseGoDuration("-500ms"); // -500
 * ```
 */
export function parseGoDuration(text: string): number {
  const invalid = () => new SyntaxError(`time: invalid duration ${goQuote(text)}`);
  let rest = text;
  let negative = false;
  if (rest.startsWith("-") || rest.startsWith("+")) {
    negative = rest.startsWith("-");
    rest = rest.slice(1);
  }
  if (rest === "0") return 0;
  if (rest === "") throw invalid();
  let total = 0n;
  while (rest !== "") {
    const number = /^([0-9]*)(?:\.([0-9]*))?/.exec(rest);
    const whole = number?.[1] ?? "";
    const fraction = number?.[2];
    if (whole === "" && (fraction === undefined || fraction === "")) throw invalid();
    rest = rest.slice(number?.[0].length ?? 0);
    const unitLength = rest.search(/[0-9.]/);
    const unit = unitLength === -1 ? rest : rest.slice(0, unitLength);
    if (unit === "") throw new SyntaxError(`time: missing unit in duration ${goQuote(text)}`);
    const unitNs = UNIT_NS.get(unit);
    if (unitNs === undefined) {
      throw new SyntaxError(`time: unknown unit ${goQuote(unit)} in duration ${goQuote(text)}`);
    }
    rest = rest.slice(unit.length);
    let value = BigInt(whole === "" ? "0" : whole) * unitNs;
    if (fraction !== undefined && fraction !== "") {
      value += (BigInt(fraction) * unitNs) / 10n ** BigInt(fraction.length);
    }
    total += value;
    if (total > MAX_NS + 1n) throw invalid();
  }
  if (total > MAX_NS + (negative ? 1n : 0n)) throw invalid();
  return nsToMs(negative ? -total : total);
}

/**
 * Formats milliseconds the way Go's `Duration.String` does: `0s`, `500ms`, `1.5s`, `1m0s`,
 * `1h2m3.5s`, `-30s`; sub-millisecond parts use `µs` and `ns`. Values are rounded to whole
 * nanoseconds, Go's resolution.
 *
 * @example
 * ```ts
 * formatGoDuration(30000); // "30s"
 * formatGoDuration(60000); // "1m0s"
 * formatGoDuration(3723500); // "1h2m3.5s"
 * ```
 */
export function formatGoDuration(ms: number): string {
  if (!Number.isFinite(ms)) throw new RangeError(`cannot format ${ms} ms as a Go duration`);
  let ns = BigInt(Math.round(ms * 1e6));
  const sign = ns < 0n ? "-" : "";
  if (ns < 0n) ns = -ns;
  if (ns === 0n) return "0s";
  if (ns < 1_000n) return `${sign}${ns}ns`;
  if (ns < NS_PER_MS) return `${sign}${decimal(ns, 3)}µs`;
  if (ns < 1_000_000_000n) return `${sign}${decimal(ns, 6)}ms`;
  const seconds = decimal(ns % 60_000_000_000n, 9);
  const minutes = ns / 60_000_000_000n;
  if (minutes === 0n) return `${sign}${seconds}s`;
  const hours = minutes / 60n;
  if (hours === 0n) return `${sign}${minutes}m${seconds}s`;
  return `${sign}${hours}h${minutes % 60n}m${seconds}s`;
}

/** `value / 10^digits` in decimal, without trailing zeros or a bare point (Go's fmtFrac). */
function decimal(value: bigint, digits: number): string {
  const scale = 10n ** BigInt(digits);
  const fraction = (value % scale).toString().padStart(digits, "0").replace(/0+$/, "");
  return fraction === "" ? `${value / scale}` : `${value / scale}.${fraction}`;
}

/** Nanoseconds to milliseconds without losing the whole-millisecond part to float rounding. */
function nsToMs(ns: bigint): number {
  return Number(ns / NS_PER_MS) + Number(ns % NS_PER_MS) / 1e6;
}

/** Go's `quote` for error messages: a double-quoted string. */
function goQuote(text: string): string {
  return JSON.stringify(text);
}
