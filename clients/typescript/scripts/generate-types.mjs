// Writes src/generated/ from the JSON Schemas in schema/ (the contract's machine-readable half,
// generated from the daemon's own types), or with --check fails when the checked-in files differ
// from a fresh generation, so the client cannot drift from the wire format unnoticed.
import { readdir, readFile, writeFile, mkdir, rm } from "node:fs/promises";
import { basename, dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { compile } from "json-schema-to-typescript";

const here = dirname(fileURLToPath(import.meta.url));
const schemaDir = resolve(process.env.TIMER_SCHEMA_DIR ?? join(here, "../../../schema"));
const outDir = resolve(join(here, "../src/generated"));
const check = process.argv.includes("--check");

/** The title of each schema names its main type; its file name (kebab-case) names the module. */
const banner = (file) =>
  `// Generated from schema/${file} by scripts/generate-types.mjs (json-schema-to-typescript).\n` +
  `// Do not edit: \`npm run generate\` writes it again, \`npm run check:generated\` finds drift.\n`;

/**
 * Two adjustments to what the generator would read, neither changing what a message may hold:
 * - `Data` has no `type` because it is any JSON value; json-schema-to-typescript reads a
 *   typeless schema with a description as an object, so it is told `unknown` instead.
 * - An event's payload definition has the event's own name (`DueTimeReached` inside
 *   `DueTimeReached`); it is titled `…Payload` so the two types do not collide as `…1`.
 */
function prepare(schema) {
  const defs = schema.$defs ?? {};
  if (defs.Data) defs.Data = { ...defs.Data, tsType: "unknown" };
  if (schema.title && defs[schema.title]) {
    defs[schema.title] = { ...defs[schema.title], title: `${schema.title}Payload` };
  }
  return schema;
}

async function generate() {
  const files = (await readdir(schemaDir)).filter((f) => f.endsWith(".json")).sort();
  const out = new Map();
  const titles = [];
  for (const file of files) {
    const schema = prepare(JSON.parse(await readFile(join(schemaDir, file), "utf8")));
    const ts = await compile(schema, schema.title, {
      bannerComment: banner(file),
      cwd: schemaDir,
      strictIndexSignatures: true,
      style: { singleQuote: false, printWidth: 100 },
    });
    const module = basename(file, ".json");
    out.set(`${module}.ts`, ts);
    titles.push([module, schema.title]);
  }
  // Each file repeats the definitions it shares with others (TenantId, TimerView…), all made
  // from the same Rust types; the index exports every name once, from the first file with it.
  const exported = new Map();
  for (const [module] of titles) {
    for (const [, name] of out.get(`${module}.ts`).matchAll(/^export (?:type|interface) (\w+)/gm)) {
      if (!exported.has(name)) exported.set(name, module);
    }
  }
  let index = banner("*.json");
  for (const [module] of titles) {
    const names = [...exported].filter(([, m]) => m === module).map(([n]) => n);
    if (names.length > 0) index += `export type { ${names.join(", ")} } from "./${module}.js";\n`;
  }
  out.set("index.ts", index);
  return out;
}

const fresh = await generate();
if (check) {
  const onDisk = new Set((await readdir(outDir).catch(() => [])).filter((f) => f.endsWith(".ts")));
  const drift = [];
  for (const [name, text] of fresh) {
    const old = await readFile(join(outDir, name), "utf8").catch(() => null);
    if (old !== text) drift.push(old === null ? `missing: ${name}` : `differs: ${name}`);
    onDisk.delete(name);
  }
  for (const name of onDisk) drift.push(`not generated from any schema: ${name}`);
  if (drift.length > 0) {
    console.error(`src/generated/ is not what schema/ generates (run \`npm run generate\`):`);
    for (const line of drift) console.error(`  ${line}`);
    process.exit(1);
  }
  console.log(`src/generated/ matches schema/ (${fresh.size} files)`);
} else {
  await rm(outDir, { recursive: true, force: true });
  await mkdir(outDir, { recursive: true });
  for (const [name, text] of fresh) await writeFile(join(outDir, name), text);
  console.log(`wrote ${fresh.size} files to src/generated/`);
}
