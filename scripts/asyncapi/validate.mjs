// Validates AsyncAPI documents with @asyncapi/parser (schema, references, Spectral's AsyncAPI rules).
// Every error and warning goes to stderr, one line each, starting with the file's name (hints too with
// ASYNCAPI_HINTS=1); stdout gets one JSON line per file saying what the parser read: valid (no error,
// severity 0), version, channels, operations, messages, counts. Exit 1 when any file has an error.
//   node scripts/asyncapi/validate.mjs MODULES_DIR FILE...      (scripts/asyncapi.sh validate runs this)
import { readFile } from "node:fs/promises";
import { createRequire } from "node:module";
import path from "node:path";

const [modules, ...files] = process.argv.slice(2);
if (!modules || !files.length) {
  console.error("usage: node validate.mjs MODULES_DIR FILE...");
  process.exit(2);
}
// The parser is installed under MODULES_DIR (.run/asyncapi), not next to this script.
const require = createRequire(path.resolve(modules, "package.json"));
const { Parser } = require("@asyncapi/parser");

const SEVERITY = ["error", "warning", "information", "hint"];
const shown = process.env.ASYNCAPI_HINTS === "1" ? 3 : 1;
const parser = new Parser(); // one for all files: loading its rules is most of the time
let failed = false;

for (const file of files) {
  const source = path.resolve(file);
  const { document, diagnostics } = await parser.parse(await readFile(source, "utf8"), { source });
  for (const d of diagnostics.filter((d) => d.severity <= shown)) {
    const line = d.range ? d.range.start.line + 1 : 0;
    const where = d.path && d.path.length ? ` at /${d.path.join("/")}` : "";
    console.error(`${file}:${line}: ${SEVERITY[d.severity] ?? d.severity}: ${d.message} [${d.code}]${where}`);
  }
  const count = (severity) => diagnostics.filter((d) => d.severity === severity).length;
  const valid = count(0) === 0 && Boolean(document);
  if (!valid) {
    console.error(`${file}: ${count(0)} error(s): not a valid AsyncAPI document`);
    failed = true;
  }
  const ids = (collection) => collection.all().map((item) => item.id());
  const read = document
    ? {
        asyncapi: document.version(),
        title: document.info().title(),
        version: document.info().version(),
        channels: Object.fromEntries(document.channels().all().map((c) => [c.id(), c.address()])),
        operations: Object.fromEntries(document.operations().all().map((o) => [o.id(), o.action()])),
        messages: ids(document.components().messages()),
      }
    : {};
  console.log(JSON.stringify({ file, valid, errors: count(0), warnings: count(1), ...read }));
}
process.exit(failed ? 1 : 0);
