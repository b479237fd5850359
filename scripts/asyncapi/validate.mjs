// Validates an AsyncAPI document with @asyncapi/parser (schema, references, Spectral's AsyncAPI rules):
// every error and warning goes to stderr, one line each (hints too with ASYNCAPI_HINTS=1); exit 1 when
// any is an error (severity 0).
// On success stdout is one JSON line saying what the parser read (version, channels, operations, messages).
//   node scripts/asyncapi/validate.mjs MODULES_DIR FILE      (scripts/asyncapi.sh validate runs this)
import { readFile } from "node:fs/promises";
import { createRequire } from "node:module";
import path from "node:path";

const [modules, file] = process.argv.slice(2);
if (!modules || !file) {
  console.error("usage: node validate.mjs MODULES_DIR FILE");
  process.exit(2);
}
// The parser is installed under MODULES_DIR (.run/asyncapi), not next to this script.
const require = createRequire(path.resolve(modules, "package.json"));
const { Parser } = require("@asyncapi/parser");

const SEVERITY = ["error", "warning", "information", "hint"];
const source = path.resolve(file);
const { document, diagnostics } = await new Parser().parse(await readFile(source, "utf8"), { source });

const shown = process.env.ASYNCAPI_HINTS === "1" ? 3 : 1;
for (const d of diagnostics.filter((d) => d.severity <= shown)) {
  const line = d.range ? d.range.start.line + 1 : 0;
  const where = d.path && d.path.length ? ` at /${d.path.join("/")}` : "";
  console.error(`${file}:${line}: ${SEVERITY[d.severity] ?? d.severity}: ${d.message} [${d.code}]${where}`);
}
const errors = diagnostics.filter((d) => d.severity === 0).length;
if (errors || !document) {
  console.error(`${file}: ${errors} error(s): not a valid AsyncAPI document`);
  process.exit(1);
}
const ids = (collection) => collection.all().map((item) => item.id());
console.log(
  JSON.stringify({
    asyncapi: document.version(),
    title: document.info().title(),
    version: document.info().version(),
    channels: Object.fromEntries(document.channels().all().map((c) => [c.id(), c.address()])),
    operations: Object.fromEntries(document.operations().all().map((o) => [o.id(), o.action()])),
    messages: ids(document.components().messages()),
    warnings: diagnostics.filter((d) => d.severity === 1).length,
  }),
);
