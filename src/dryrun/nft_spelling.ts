/**
 * The one spelling of what nft may print two ways, token by token: chain priorities as
 * numbers, times in seconds, IPv6 addresses compressed, host prefixes dropped, hexadecimal in
 * decimal; and the small text helpers the table images are read with. Pure.
 *
 * @module
 */
import { parseAddress } from "../model/ip.ts";

/** Standard priority names of the ip, ip6 and inet families. */
const PRIORITIES: Readonly<Record<string, number>> = {
  raw: -300,
  mangle: -150,
  dstnat: -100,
  filter: 0,
  security: 50,
  srcnat: 100,
};

/** A chain priority (`-110`, `dstnat`, `dstnat - 10`) as a number, or as written if unknown. */
export function priority(text: string): string {
  const m = /^(-?\d+|[a-z]+)(?:\s*([+-])\s*(\d+))?$/.exec(text.trim());
  if (m === null) return text.trim();
  const base = /^-?\d+$/.test(m[1]) ? Number(m[1]) : PRIORITIES[m[1]];
  if (base === undefined) return text.trim();
  const offset = m[2] === undefined ? 0 : (m[2] === "-" ? -1 : 1) * Number(m[3]);
  return String(base + offset);
}

/** An nft time (`10800s`, `3h`, `1d2h3m4s`, `500ms`) in seconds. */
export function seconds(text: string): string {
  let total = 0;
  for (const [, n, unit] of text.matchAll(/(\d+)(ms|d|h|m|s)/g)) {
    total += Number(n) * { ms: 0.001, d: 86400, h: 3600, m: 60, s: 1 }[unit]!;
  }
  return String(total);
}

/** Splits an element list on the commas between elements (none inside a quoted comment). */
export function splitElements(list: string): string[] {
  const out: string[] = [];
  let start = 0;
  let quoted = false;
  for (let i = 0; i < list.length; i++) {
    const c = list[i];
    if (c === '"') quoted = !quoted;
    else if (c === "," && !quoted) {
      out.push(list.slice(start, i).trim());
      start = i + 1;
    }
  }
  const last = list.slice(start).trim();
  if (last !== "") out.push(last);
  return out.filter((e) => e !== "");
}

/**
 * Text with every token in one spelling: IPv6 addresses compressed (RFC 5952), host prefixes
 * (`/32`, `/128`) dropped, hexadecimal numbers in decimal, runs of spaces as one.
 */
export function normalTokens(text: string): string {
  return text.trim().split(/\s+/).map(normalToken).join(" ");
}

/** Tokens already in their one spelling: words, numbers, IPv4 addresses and prefixes. */
const PLAIN =
  /^(?:[a-z@_-][\w@.-]*|\d+|\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3}(?:\/(?:[0-2]?\d|3[01]))?)$/;

export function normalToken(token: string): string {
  if (PLAIN.test(token)) return token;
  if (/^0x[0-9a-f]+$/i.test(token)) return String(parseInt(token, 16));
  const bracketed = /^\[([0-9a-f:.]+)\](.*)$/i.exec(token);
  if (bracketed) return `[${normalToken(bracketed[1])}]${bracketed[2]}`;
  if (!/[0-9]/.test(token) || !/[.:]/.test(token)) return token;
  const [address, length] = token.split("/");
  const ip = parseAddress(address);
  if (!ip.ok) return token;
  const host = ip.family === "IPv6" ? "128" : "32";
  return length === undefined || length === host ? ip.address : `${ip.address}/${length}`;
}

/** The text between the first `open` and the last `close`, or undefined. */
export function between(text: string, open: string, close: string): string | undefined {
  const from = text.indexOf(open);
  const to = text.lastIndexOf(close);
  return from < 0 || to < from ? undefined : text.slice(from + 1, to).trim();
}

/** Open braces minus closed ones outside quotes. */
export function braceDepth(text: string): number {
  let depth = 0;
  let quoted = false;
  for (const c of text) {
    if (c === '"') quoted = !quoted;
    else if (!quoted && c === "{") depth++;
    else if (!quoted && c === "}") depth--;
  }
  return depth;
}

export function clip(line: string): string {
  return line.length > 120 ? `${line.slice(0, 117)}...` : line;
}
