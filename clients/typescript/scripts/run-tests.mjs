// Runs the compiled tests (build/test/**/*.test.js) with node's own test runner. Arguments
// narrow the files by substring (`node scripts/run-tests.mjs effect trace`). Each test file
// starts its own nats-server and daemon, so files may run side by side.
import { spawnSync } from "node:child_process";
import { readdirSync } from "node:fs";
import { join } from "node:path";

const root = "build/test";
const files = readdirSync(root, { recursive: true })
  .map(String)
  .filter((f) => f.endsWith(".test.js"))
  .filter((f) => process.argv.length <= 2 || process.argv.slice(2).some((p) => f.includes(p)))
  .sort()
  .map((f) => join(root, f));
if (files.length === 0) {
  console.error("no test files matched");
  process.exit(1);
}
const concurrency = process.env.TEST_CONCURRENCY ?? "2";
const result = spawnSync(
  process.execPath,
  ["--test", `--test-concurrency=${concurrency}`, "--test-timeout=120000", ...files],
  { stdio: "inherit" },
);
process.exit(result.status ?? 1);
