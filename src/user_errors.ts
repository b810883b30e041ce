/**
 * Start-up errors a user can cause — a bad flag or config file, a cluster file that cannot be
 * read or parsed, a kubeconfig that cannot be used, an API server that never answers a one-shot
 * run, a permission Deno was not given — reported as one line naming the input and the problem, exit status 2, no stack trace.
 * Anything else is a programming error and keeps its stack.
 *
 * The errors are recognised by name, so that this module loads none of the modules that throw
 * them (`main.ts` loads the file source or the API client only when the run needs it).
 *
 * @module
 */

/** The exit status of a run ended by a user's error. */
export const USER_ERROR_EXIT_CODE = 2;

/** Names of the errors that stand for a user's mistake, with the module that throws each. */
const USER_ERRORS: ReadonlySet<string> = new Set([
  "ConfigError", // src/config/config_error.ts: flags and the --config file
  "ClusterFileError", // src/source/cluster_file.ts: the --from-file file
  "ApiConfigError", // src/source/api_connection.ts: kubeconfig, --master, in-cluster account
  "ApiUnreachableError", // src/source/api_source.ts: no initial state within the wait
  "ServeError", // src/server/serve.ts: a health or metrics port not bound, bindAddressHardFail
  // Deno's own, when a permission the run needs was not granted (the image grants only those
  // its runs need: a path outside them, or a program not on its list, ends here).
  "NotCapable",
]);

/** The longest message shown; a longer one (a huge value quoted back) is cut. */
const MAX_MESSAGE_LENGTH = 1000;

/** Whether `error` is one a user caused (see the module doc). */
export function isUserError(error: unknown): error is Error {
  if (!(error instanceof Error)) return false;
  // A denied permission wrapped by the module that met it (`cannot run nft: Requires run …`).
  const cause = error.cause;
  return USER_ERRORS.has(error.name) || (cause instanceof Error && cause.name === "NotCapable");
}

/** `kube-nftproxy: <message>`, on one line and at most ~1000 characters. */
export function userErrorLine(error: Error): string {
  let message = error.message.replace(/\s*[\r\n]+\s*/g, " ").trim();
  if (message.length > MAX_MESSAGE_LENGTH) message = `${message.slice(0, MAX_MESSAGE_LENGTH)}…`;
  return `kube-nftproxy: ${message}`;
}

/**
 * Runs `run` and resolves with its exit status; a user's error it throws is printed as one
 * line (default: on stderr) and gives {@link USER_ERROR_EXIT_CODE}. Other errors are thrown on.
 *
 * @example
 * ```ts
 * Deno.exit(await reportUserErrors(() => main(Deno.args)));
 * ```
 */
export async function reportUserErrors(
  run: () => Promise<number>,
  print: (line: string) => void = (line) => console.error(line),
): Promise<number> {
  try {
    return await run();
  } catch (error) {
    if (!isUserError(error)) throw error;
    print(userErrorLine(error));
    return USER_ERROR_EXIT_CODE;
  }
}
