/** Where the package and the repository are, wherever the compiled tests run from. */
import { existsSync, readFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

function findPackageRoot(): string {
  let dir = dirname(fileURLToPath(import.meta.url));
  for (;;) {
    const manifest = join(dir, "package.json");
    if (existsSync(manifest) && JSON.parse(readFileSync(manifest, "utf8")).name === "timer-service-client") return dir;
    const up = dirname(dir);
    if (up === dir) throw new Error("the timer-service-client package root was not found");
    dir = up;
  }
}

export const packageRoot = findPackageRoot();
export const repoRoot = resolve(packageRoot, "../..");
