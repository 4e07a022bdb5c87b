// Runs Python on the official MicroPython WebAssembly port (npm @micropython/micropython-webassembly-pyscript,
// pinned in package.json): a 32-bit port (wasm32: small ints stop at 2^30, sys.maxsize 2^31-1) with no
// native emitter, so a board's _viper.mpy is refused there and the core's bytecode twins run.
//
//   node tools/wasm/run_core.mjs --lib DIR [--vectors DIR] [--heap 64K] -c CODE
//   node tools/wasm/run_core.mjs --lib DIR --vectors DIR [--heap 64K] CHECK...
//
// DIR (copied into the port's in-memory file system at /lib, which is on its sys.path) holds the
// modules as a board holds them (.mpy from mpy-cross); --vectors go to /vectors. With -c the code runs
// once; otherwise each CHECK of tests/mpy/core_runner.py runs in a fresh interpreter (one board boot
// each, as on the unix port), and its lines ("ok NAME" / "FAIL NAME: why") are printed, then
// "N passed, M failed". An uncaught Python exception is one line: "ERROR Type: message".
// Exit status: 0 when everything passed.
import fs from "node:fs";
import path from "node:path";
import { loadMicroPython } from "@micropython/micropython-webassembly-pyscript";

function parse(argv) {
  const o = { lib: null, vectors: null, heap: "64K", code: null, checks: [] };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (a === "--lib") o.lib = argv[++i];
    else if (a === "--vectors") o.vectors = argv[++i];
    else if (a === "--heap") o.heap = argv[++i];
    else if (a === "-c") o.code = argv[++i];
    else o.checks.push(a);
  }
  if (!o.lib || (o.code === null && (!o.vectors || !o.checks.length))) {
    console.error("usage: run_core.mjs --lib DIR [--vectors DIR] [--heap 64K] (-c CODE | CHECK...)");
    process.exit(2);
  }
  return o;
}

function bytes(size) {
  const m = /^(\d+)([kKmM]?)$/.exec(size);
  if (!m) throw new Error("--heap: a size like 64K");
  return Number(m[1]) * ({ k: 1024, m: 1048576 }[m[2].toLowerCase()] || 1);
}

function copyTree(FS, src, dst) {
  FS.mkdirTree(dst);
  for (const e of fs.readdirSync(src, { withFileTypes: true })) {
    const s = path.join(src, e.name);
    if (e.isDirectory()) copyTree(FS, s, dst + "/" + e.name);
    else FS.writeFile(dst + "/" + e.name, fs.readFileSync(s));
  }
}

// One interpreter ("a boot"); returns the lines it printed. A Python exception that escapes becomes
// one "ERROR" line (the port's own message would be the whole traceback and the JS stack).
async function boot(o, code) {
  const lines = [];
  // linebuffer: one call per line; the initial heap is --heap (this build grows it on demand)
  const mp = await loadMicroPython({
    heapsize: bytes(o.heap),
    stdout: (l) => lines.push(l),
    stderr: (l) => lines.push(l),
  });
  copyTree(mp.FS, o.lib, "/lib");
  if (o.vectors) copyTree(mp.FS, o.vectors, "/vectors");
  try {
    mp.runPython(code);
  } catch (e) {
    if (e.name !== "PythonError") throw e;
    const msg = String(e.message).trim().split("\n");
    lines.push("ERROR " + msg[msg.length - 1]);
  }
  return lines;
}

const o = parse(process.argv.slice(2));
if (o.code !== null) {
  const lines = await boot(o, o.code);
  for (const l of lines) console.log(l);
  process.exit(lines.some((l) => l.startsWith("ERROR ")) ? 1 : 0);
}
let passed = 0;
let failed = 0;
for (const name of o.checks) {
  const lines = await boot(
    o,
    "import sys\nsys.argv[:] = ['core_runner', '/vectors', " + JSON.stringify(name) + "]\n" +
      "import core_runner\ncore_runner.main()\n",
  );
  const verdict = lines.find((l) => l === "ok " + name || l.startsWith("FAIL " + name) || l.startsWith("ERROR "));
  for (const l of lines) if (!/^\d+ passed, \d+ failed$/.test(l)) console.log(l);
  if (verdict === "ok " + name) passed++;
  else {
    failed++;
    if (!verdict) console.log("FAIL " + name + ": no verdict");
  }
}
console.log(passed + " passed, " + failed + " failed");
process.exit(failed ? 1 : 0);
