/**
 * YAML from outside the process — the cluster file, the `--config` file, a kubeconfig — loaded
 * with limits, so that no text of any shape costs more than its size.
 *
 * js-yaml bounds the nesting a text writes out (`maxDepth`), but not what its aliases make of it:
 * an alias shares the anchored value, so a 30-line file whose nine levels each repeat the one
 * before ten times parses in microseconds into a value of a billion leaves, and whatever walks
 * it afterwards (canonical JSON, the model) never finishes. Kubernetes objects never use
 * aliases, yet Kubernetes' own YAML reader accepts them, so they are accepted here too, within a
 * budget: every alias costs the number of values it repeats, drawn from a pool as large as the
 * text (one value per character, at least {@link MIN_ALIAS_BUDGET}), and the nesting an alias
 * brings in counts towards `maxDepth`. A text without aliases never touches the pool; a text
 * whose aliases would exhaust it, or that refers to an alias from inside the anchored value
 * itself, is refused with a YAMLException naming the alias's line and column.
 *
 * @module
 */
import { constructFromEvents, type Event, EVENT_ID, parseEvents, YAMLException } from "js-yaml";

/** js-yaml's own default nesting limit, kept: no Kubernetes object comes close. */
export const DEFAULT_MAX_DEPTH = 100;

/** The smallest alias budget, so that small hand-written files may use aliases freely. */
export const MIN_ALIAS_BUDGET = 10_000;

/**
 * How many values aliases may still repeat. One budget may be shared by the pieces of one file
 * (the cluster file is parsed a document at a time), so the whole file stays bounded.
 */
export class AliasBudget {
  /** The size of the pool, for messages. */
  readonly limit: number;
  /** What is left of it. */
  remaining: number;

  /** A pool of `limit` values. */
  constructor(limit: number) {
    this.limit = limit;
    this.remaining = limit;
  }

  /** The budget for a text of `length` characters: one value per character, at least the minimum. */
  static forLength(length: number): AliasBudget {
    return new AliasBudget(Math.max(MIN_ALIAS_BUDGET, length));
  }
}

/** Options of {@link loadYamlDocuments}. */
export interface BoundedYamlOptions {
  /** The file name js-yaml puts in its messages. Default none. */
  filename?: string;
  /** Deepest nesting of collections, aliases expanded. Default {@link DEFAULT_MAX_DEPTH}. */
  maxDepth?: number;
  /** What aliases may repeat. Default `AliasBudget.forLength(text.length)`. */
  aliases?: AliasBudget;
  /**
   * A key repeated in one mapping: refused (a YAMLException "duplicated mapping key", the
   * default) or allowed, the last value winning, as Go's lenient YAML reader does.
   */
  duplicateKeys?: "refuse" | "last-wins";
}

/**
 * Every document of a YAML stream (YAML 1.2 core schema, so plain JSON data), with the limits
 * of the module doc. Throws YAMLException (with `mark.line` and `mark.column`, 0-based) for a
 * syntax error, nesting beyond `maxDepth`, or aliases beyond the budget.
 *
 * @example
 * ```ts
 * loadYamlDocuments("a: &x [1, 2]\nb: *x\n"); // [{ a: [1, 2], b: [1, 2] }]
 * loadYamlDocuments("a: &x [1]\nb: [*x, *x]\n", { aliases: new AliasBudget(1) }); // throws
 * ```
 */
export function loadYamlDocuments(text: string, options: BoundedYamlOptions = {}): unknown[] {
  const filename = options.filename ?? "";
  const maxDepth = options.maxDepth ?? DEFAULT_MAX_DEPTH;
  const events = parseEvents(text, { filename, maxDepth });
  if (events.some((event) => event.type === EVENT_ID.ALIAS)) {
    checkAliases(events, text, {
      filename,
      maxDepth,
      budget: options.aliases ?? AliasBudget.forLength(text.length),
    });
  }
  const json = options.duplicateKeys === "last-wins";
  return constructFromEvents(events, { source: text, filename, json });
}

/** What an anchored value stands for once expanded: its values and its nesting. */
interface Expansion {
  values: number;
  /** Collections on the longest path down (0 for a scalar). */
  height: number;
}

/** A collection being read: how many values it holds so far and how deep it goes. */
interface Frame {
  anchor?: string;
  values: number;
  height: number;
}

/**
 * Walks the events once, sizing each anchored value as it closes, and charges every alias the
 * size of what it repeats. Throws at the first alias that would exhaust the budget, nest beyond
 * `maxDepth`, or repeat a value it is itself part of.
 */
function checkAliases(
  events: readonly Event[],
  text: string,
  context: { filename: string; maxDepth: number; budget: AliasBudget },
): void {
  const { filename, maxDepth, budget } = context;
  let anchors = new Map<string, Expansion>();
  /** Anchors of collections still open: an alias to one of them would be a cycle. */
  const open = new Set<string>();
  const stack: Frame[] = [];
  const add = (expansion: Expansion) => {
    const parent = stack.at(-1);
    if (parent === undefined) return;
    parent.values += expansion.values;
    parent.height = Math.max(parent.height, expansion.height + 1);
  };
  const anchorOf = (start: number, end: number) => start < 0 ? undefined : text.slice(start, end);
  for (const event of events) {
    switch (event.type) {
      case EVENT_ID.DOCUMENT:
        anchors = new Map();
        open.clear();
        // The document's own frame: its POP closes it like a collection's.
        stack.length = 0;
        stack.push({ values: 0, height: 0 });
        break;
      case EVENT_ID.SEQUENCE:
      case EVENT_ID.MAPPING: {
        const anchor = anchorOf(event.anchorStart, event.anchorEnd);
        if (anchor !== undefined) open.add(anchor);
        stack.push({ anchor, values: 1, height: 0 });
        break;
      }
      case EVENT_ID.SCALAR: {
        const anchor = anchorOf(event.anchorStart, event.anchorEnd);
        if (anchor !== undefined) anchors.set(anchor, { values: 1, height: 0 });
        add({ values: 1, height: 0 });
        break;
      }
      case EVENT_ID.ALIAS: {
        const name = text.slice(event.anchorStart, event.anchorEnd);
        const fail = (reason: string): never =>
          YAMLException.throwAt(text, Math.max(0, event.anchorStart - 1), reason, filename);
        if (open.has(name)) fail(`alias *${name} refers to a value that contains it`);
        // An unknown anchor is js-yaml's to report, with its own words.
        const expansion = anchors.get(name) ?? { values: 1, height: 0 };
        budget.remaining -= expansion.values;
        if (budget.remaining < 0) {
          fail(
            `aliases expand to more than ${budget.limit} values, the limit for a file of ` +
              "this size; write the values out instead",
          );
        }
        // The open collections (every frame but the document's) hold the alias's value; js-yaml
        // allows fewer than maxDepth collections inside each other.
        if (stack.length - 1 + expansion.height >= maxDepth) {
          fail(`alias *${name} nests its value deeper than maxDepth (${maxDepth})`);
        }
        add(expansion);
        break;
      }
      case EVENT_ID.POP: {
        const frame = stack.pop();
        if (frame === undefined) break;
        if (frame.anchor !== undefined) {
          open.delete(frame.anchor);
          anchors.set(frame.anchor, { values: frame.values, height: frame.height });
        }
        add(frame);
        break;
      }
    }
  }
}
