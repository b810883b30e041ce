/**
 * The proxy's version, from `deno.json`, for `--version` and the start-up log line.
 *
 * @module
 */
import denoJson from "../deno.json" with { type: "json" };

/** Semantic version of this build. */
export const VERSION: string = denoJson.version;
