/**
 * Reading the Dockerfile and `.dockerignore` the way `docker build` does, for the tests that
 * stand in for `hadolint` (which no package registry we reach ships): instructions split into
 * build stages, line continuations joined, comments dropped, and `.dockerignore` rules applied
 * to a path with Docker's last-match-wins order.
 *
 * @example
 * ```ts
 * const file = parseDockerfile(await Deno.readTextFile("Dockerfile"));
 * file.stages.map((stage) => stage.image); // ["denoland/deno:2.9.6", "debian:bookworm-slim"]
 * file.args; // { DENO_IMAGE: "denoland/deno:2.9.6", BASE_IMAGE: "debian:bookworm-slim" }
 * ```
 *
 * @module
 */

/** One instruction, with its continuation lines joined by single spaces. */
export interface Instruction {
  /** The keyword in upper case: `FROM`, `RUN`, `COPY`, … */
  keyword: string;
  /** Everything after the keyword, trimmed. */
  args: string;
  /** 1-based line where the instruction starts, for messages. */
  line: number;
}

/** One build stage: its `FROM` and the instructions up to the next `FROM`. */
export interface Stage {
  /** The base image reference, a `${ARG}` replaced by that ARG's default (`debian:bookworm-slim`). */
  image: string;
  /** The reference as written (`${BASE_IMAGE}`). */
  from: string;
  /** The `AS` name, or "" when the stage has none. */
  name: string;
  /** The instructions after `FROM`, in order. */
  instructions: Instruction[];
}

/** A parsed Dockerfile. */
export interface Dockerfile {
  /** Every instruction in file order, `FROM` included. */
  instructions: Instruction[];
  /** The build stages in order; the last one is the image. */
  stages: Stage[];
  /** The `ARG`s before the first `FROM` (the ones a `FROM` may use), with their defaults. */
  args: Record<string, string>;
}

/**
 * Parses Dockerfile text: drops comment lines (also inside continuations, as Docker does),
 * joins lines ending in `\`, and groups instructions into stages. Throws on an instruction
 * before the first `FROM` other than `ARG`, and on heredocs, which it does not read.
 */
export function parseDockerfile(text: string): Dockerfile {
  const instructions: Instruction[] = [];
  let pending: { parts: string[]; line: number } | undefined;
  text.split("\n").forEach((raw, index) => {
    const line = raw.trim();
    if (line.startsWith("#")) return;
    if (line === "" && pending === undefined) return;
    const continued = line.endsWith("\\");
    const part = continued ? line.slice(0, -1).trim() : line;
    pending ??= { parts: [], line: index + 1 };
    if (part !== "") pending.parts.push(part);
    if (continued) return;
    const joined = pending.parts.join(" ");
    const match = /^(\S+)\s*(.*)$/.exec(joined);
    if (match !== null) {
      if (match[2].includes("<<")) {
        throw new Error(`Dockerfile line ${pending.line}: heredocs are not supported here`);
      }
      instructions.push({ keyword: match[1].toUpperCase(), args: match[2], line: pending.line });
    }
    pending = undefined;
  });
  const stages: Stage[] = [];
  const args: Record<string, string> = {};
  for (const instruction of instructions) {
    if (instruction.keyword === "FROM") {
      const [from, as, name] = instruction.args.split(/\s+/).filter((word) =>
        !word.startsWith("--platform=")
      );
      stages.push({
        image: from.replace(/\$\{(\w+)\}|\$(\w+)/g, (whole, a, b) => args[a ?? b] ?? whole),
        from,
        name: as?.toUpperCase() === "AS" ? name : "",
        instructions: [],
      });
    } else if (stages.length > 0) {
      stages[stages.length - 1].instructions.push(instruction);
    } else if (instruction.keyword === "ARG") {
      const [name, value] = instruction.args.split("=", 2);
      args[name] = value ?? "";
    } else {
      throw new Error(`Dockerfile line ${instruction.line}: ${instruction.keyword} before FROM`);
    }
  }
  return { instructions, stages, args };
}

/** The exec form (`["a", "b"]`) of an `ENTRYPOINT`/`CMD`, or `undefined` for the shell form. */
export function execForm(args: string): string[] | undefined {
  try {
    const parsed: unknown = JSON.parse(args);
    return Array.isArray(parsed) && parsed.every((word) => typeof word === "string")
      ? parsed
      : undefined;
  } catch {
    return undefined;
  }
}

/** One `.dockerignore` rule. */
interface IgnoreRule {
  /** A `!` rule lets back in what earlier rules excluded. */
  include: boolean;
  pattern: RegExp;
}

/**
 * A predicate telling whether `.dockerignore` text keeps a context path (relative, with `/`)
 * out of the build context. Rules match the path or any directory above it; `*` and `?` stay
 * within one path segment, `**` spans any number; the last matching rule wins.
 *
 * @example
 * ```ts
 * const ignored = dockerignore("*\n!src/\nsrc/**\/*_test.ts\n");
 * ignored("src/main.ts"); // false
 * ignored("src/a_test.ts"); // true
 * ```
 */
export function dockerignore(text: string): (path: string) => boolean {
  const rules: IgnoreRule[] = text.split("\n")
    .map((line) => line.trim())
    .filter((line) => line !== "" && !line.startsWith("#"))
    .map((line) => {
      const include = line.startsWith("!");
      const glob = (include ? line.slice(1) : line).replace(/^\/+|\/+$/g, "");
      return { include, pattern: globToRegExp(glob) };
    });
  return (path: string) => {
    const segments = path.split("/");
    const candidates = segments.map((_, i) => segments.slice(0, i + 1).join("/"));
    let ignored = false;
    for (const rule of rules) {
      if (candidates.some((candidate) => rule.pattern.test(candidate))) ignored = !rule.include;
    }
    return ignored;
  };
}

function globToRegExp(glob: string): RegExp {
  let source = "";
  for (let i = 0; i < glob.length; i++) {
    const char = glob[i];
    if (glob.startsWith("**/", i)) {
      source += "(?:.*/)?";
      i += 2;
    } else if (glob.startsWith("**", i)) {
      source += ".*";
      i += 1;
    } else if (char === "*") source += "[^/]*";
    else if (char === "?") source += "[^/]";
    else source += char.replace(/[.+^${}()|[\]\\]/g, "\\$&");
  }
  return new RegExp(`^${source}$`);
}
