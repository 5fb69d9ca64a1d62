// Removes the output folders named on the command line, so a build never ships a stale file.
import { rm } from "node:fs/promises";
for (const dir of process.argv.slice(2)) await rm(dir, { recursive: true, force: true });
