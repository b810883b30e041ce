/**
 * Running a piece of code in a Deno of its own with exactly the permissions given — as the
 * container image runs the proxy — for tests of what the proxy does without some of them.
 * (`deno eval` has every permission, so the code goes to a temporary file.)
 *
 * @example
 * ```ts
 * const out = await runWithPermissions(`console.log(Deno.pid > 0)`, ["--allow-read=/tmp"]);
 * out.stdout; // "true\n"
 * ```
 *
 * @module
 */

/** What the code's process ended with. */
export interface PermittedRun {
  code: number;
  success: boolean;
  stdout: string;
  stderr: string;
}

const CONFIG = new URL("../deno.json", import.meta.url).pathname;

/**
 * Runs `code` (a module body; imports by absolute URL or by the project's import map) with
 * `permissions` only, never prompting; resolves with its exit status and output.
 */
export async function runWithPermissions(
  code: string,
  permissions: readonly string[],
): Promise<PermittedRun> {
  const script = await Deno.makeTempFile({ prefix: "knp-permitted-", suffix: ".ts" });
  try {
    await Deno.writeTextFile(script, code);
    const out = await new Deno.Command(Deno.execPath(), {
      args: ["run", "--no-prompt", "--config", CONFIG, ...permissions, script],
      stdout: "piped",
      stderr: "piped",
    }).output();
    const decoder = new TextDecoder();
    return {
      code: out.code,
      success: out.success,
      stdout: decoder.decode(out.stdout),
      stderr: decoder.decode(out.stderr),
    };
  } finally {
    await Deno.remove(script);
  }
}
