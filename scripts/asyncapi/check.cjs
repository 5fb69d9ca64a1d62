// Validates an AsyncAPI document with the AsyncAPI parser (its structure, its references, and
// each message's payload schema), and checks that it names every JSON Schema file beside it.
// Usage: node check.cjs schema/asyncapi.yaml (with NODE_PATH reaching @asyncapi/parser).
'use strict';
const fs = require('fs');
const path = require('path');
const { Parser, fromFile, DiagnosticSeverity } = require('@asyncapi/parser');

async function main(file) {
  const { document, diagnostics } = await fromFile(new Parser(), file).parse();
  const problems = diagnostics.filter(
    (d) => d.severity === DiagnosticSeverity.Error || d.severity === DiagnosticSeverity.Warning,
  );
  for (const d of problems) {
    const level = d.severity === DiagnosticSeverity.Error ? 'error' : 'warning';
    console.error(`${file}: ${level}: ${d.message} (${d.code}) at ${d.path.join('.') || '/'}`);
  }
  if (!document || problems.length > 0) {
    throw new Error(`${file} is not a valid AsyncAPI document`);
  }
  const named = new Set(document.allMessages().all().map((m) => m.payload() && m.payload().id()));
  const dir = path.dirname(file);
  const unnamed = fs
    .readdirSync(dir)
    .filter((name) => name.endsWith('.json'))
    .map((name) => JSON.parse(fs.readFileSync(path.join(dir, name), 'utf8')).$id)
    .filter((id) => !named.has(id));
  if (unnamed.length > 0) {
    throw new Error(`${file} names no message with the schema ${unnamed.join(', ')}`);
  }
  const counts = [
    `${document.allChannels().length} channels`,
    `${document.allOperations().length} operations`,
    `${document.allMessages().length} messages`,
  ];
  console.log(`${file}: valid AsyncAPI ${document.version()}: ${counts.join(', ')}`);
}

main(process.argv[2]).catch((e) => {
  console.error(`error: ${e.message}`);
  process.exit(1);
});
