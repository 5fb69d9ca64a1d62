/**
 * Temporary folders of a test process (server storage, daemon files, the daemon binary's
 * copy), removed when the process exits however it exits, after its children are gone.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

const folders: string[] = [];
process.on("exit", () => {
  for (const folder of folders) rmSync(folder, { recursive: true, force: true });
});

/** A new folder under the system's temp folder, named `prefix…`, removed at exit. */
export function scratch(prefix: string): string {
  const folder = mkdtempSync(join(tmpdir(), prefix));
  folders.push(folder);
  return folder;
}
