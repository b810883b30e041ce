/**
 * What a render produces for one nft family: the fixed {@link Skeleton} of a table and the
 * {@link Fragment} each service port adds to it (its chains and its elements, already formatted
 * as a script writes them). The syncer counts owners of these pieces; nothing here renders.
 *
 * @module
 */
import type { ChainDef, ElementDef, SetDef } from "./transaction.ts";

/** A chain with its rules. */
export interface ChainWithRules {
  readonly def: ChainDef;
  readonly rules: readonly string[];
}

/** The fixed part of a table; it changes only with the options (so only in full syncs). */
export interface Skeleton {
  readonly chains: readonly ChainWithRules[];
  readonly sets: readonly SetDef[];
  /** Elements that depend on the node, not on services (the node-port addresses). */
  readonly elements: readonly ElementDef[];
}

/**
 * A service port's elements of one set, already formatted as a script writes them
 * (`key comment "…" : value`), so a render allocates no object per element. `keys[i]` is the
 * key of `lines[i]`; a key occurs at most once per fragment (a repeated key takes the later
 * line, in the first place).
 */
export interface KeyedElements {
  readonly set: string;
  readonly entry?: undefined;
  readonly keys: readonly string[];
  readonly lines: readonly string[];
}

/**
 * A service port's elements of one entry point (`addr . proto . port`) in an endpoint map, as
 * one text: `count` formatted elements joined by `, ` (as an `add element` command lists them),
 * element `i` having the key `<entry> . <i>`. The text may be written out only when read.
 */
export interface EntryElements {
  readonly set: string;
  readonly entry: string;
  readonly count: number;
  readonly text: string;
}

/** A service port's elements of one set, or of one entry point in an endpoint map. */
export type ElementGroup = KeyedElements | EntryElements;

/** Separates formatted elements in {@link EntryElements.text} (never inside an element). */
export const ELEMENT_SEPARATOR = ", ";

/**
 * What one service port adds: chains (name → rules) and elements. Chains and elements may be
 * shared with other service ports (balancers, hairpin entries); the syncer counts owners.
 */
export interface Fragment {
  readonly chains: ReadonlyMap<string, readonly string[]>;
  /** Element groups in the order of their first element. */
  readonly elements: readonly ElementGroup[];
  /** Per-service sets (only IPv6 ClientIP affinity has them). */
  readonly sets?: ReadonlyMap<string, SetDef>;
}
