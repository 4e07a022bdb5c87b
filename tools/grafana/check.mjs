// Checks Grafana dashboard JSON files against Grafana's own published dashboard model: the
// `Dashboard` type of @grafana/schema (raw/dashboard/x, the classic JSON model that "Import
// dashboard" reads), with the TypeScript compiler. A key the model does not have (an excess
// property of an object literal) and a value of the wrong type are errors, one line each with the
// file's line number. The model's enums become unions of their values (JSON holds "absolute", not
// ThresholdsMode.Absolute; a value outside the enum is still an error). Usage: node check.mjs
// FILE.json... (exit 0: all valid, 1: errors).
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import ts from "typescript";

const here = path.dirname(fileURLToPath(import.meta.url));
const schemaDir = path.join(here, "node_modules", "@grafana", "schema");
const version = JSON.parse(fs.readFileSync(path.join(schemaDir, "package.json"), "utf8")).version;
const model = fs
  .readFileSync(path.join(schemaDir, "dist", "types", "raw", "dashboard", "x", "types.gen.d.ts"), "utf8")
  .replace(/export declare enum (\w+) \{([^}]*)\}/g, (_, name, body) => {
    const values = [...body.matchAll(/=\s*("[^"]*"|-?\d+)/g)].map((m) => m[1]);
    return `export type ${name} = ${values.join(" | ")};`;
  });
const work = fs.mkdtempSync(path.join(os.tmpdir(), "leadwire-grafana-check-"));
fs.writeFileSync(path.join(work, "model.d.ts"), model);

let failed = 0;
for (const file of process.argv.slice(2)) {
  const json = fs.readFileSync(file, "utf8");
  JSON.parse(json); // not JSON at all: the exception says where
  const src = path.join(work, "dashboard.ts");
  // line 1: the import; the JSON starts on line 2, so a diagnostic's 0-based line is the JSON's line
  fs.writeFileSync(src, `import type { Dashboard } from "./model";\nexport const dashboard: Dashboard = ${json};\n`);
  const program = ts.createProgram([src], {
    noEmit: true,
    strict: true,
    skipLibCheck: true,
    target: ts.ScriptTarget.ES2020,
    module: ts.ModuleKind.ESNext,
    moduleResolution: ts.ModuleResolutionKind.Bundler,
  });
  const diags = ts.getPreEmitDiagnostics(program);
  for (const d of diags) {
    const msg = ts.flattenDiagnosticMessageText(d.messageText, " ");
    const line = d.file && d.start !== undefined ? d.file.getLineAndCharacterOfPosition(d.start).line : 0;
    console.log(`${file}:${line}: ${msg}`);
  }
  if (diags.length) failed++;
  else console.log(`${file}: valid (@grafana/schema ${version} Dashboard)`);
}
fs.rmSync(work, { recursive: true });
process.exit(failed ? 1 : 0);
