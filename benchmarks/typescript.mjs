// The TypeScript binding's speed, in one run: decode against JSON.parse alone and against
// JSON.parse + an Ajv validator of the same sender's union (voxwire's exported JSON Schema), per
// protocol; the frame codec against a bare DataView read of the same header.
//
//   node benchmarks/typescript.mjs PACKAGE_DIR AJV_DIR [--quick]
//
// PACKAGE_DIR is an installed `voxwire` npm package (its dist/), AJV_DIR an installed `ajv`;
// tests/test_typescript.py runs it with --quick so it cannot rot. The messages are every valid
// decode vector of each sender (generated/voxwire/<protocol>/vectors.jsonl). Numbers on a busy
// machine are noisy: the ratios of one run are what count.
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { join, resolve } from "node:path";
import { pathToFileURL } from "node:url";

const [packageDir, ajvDir, ...flags] = process.argv.slice(2);
if (packageDir === undefined || ajvDir === undefined) {
  console.error("usage: node benchmarks/typescript.mjs PACKAGE_DIR AJV_DIR [--quick]");
  process.exit(2);
}
const quick = flags.includes("--quick");
const ROOT = resolve(import.meta.dirname, "..");
const load = (path) => import(pathToFileURL(join(resolve(packageDir), "dist", path)).href);
const Ajv2020 = createRequire(join(resolve(ajvDir), "package.json"))("./dist/2020.js").default;

const SCHEMA_UNION = { server: "AnyServerMessage", client: "ClientMessage", agent: "AgentMessage" };
const BUDGET_MS = quick ? 60 : 1500;

/** Calls of `body` per second, over at least BUDGET_MS (after a warm-up). */
function rate(body, items) {
  for (let i = 0; i < 3; i++) for (const item of items) body(item);
  let calls = 0;
  const start = process.hrtime.bigint();
  let elapsed = 0;
  do {
    for (const item of items) body(item);
    calls += items.length;
    elapsed = Number(process.hrtime.bigint() - start) / 1e6;
  } while (elapsed < BUDGET_MS);
  return (calls / elapsed) * 1000;
}

/** Per sender: the valid messages (timed) and the refused ones (to count what Ajv lets through). */
function vectors(protocol) {
  const text = readFileSync(join(ROOT, "generated", "voxwire", protocol, "vectors.jsonl"), "utf8");
  const bySender = new Map();
  for (const line of text.split("\n")) {
    if (!line.trim()) continue;
    const item = JSON.parse(line);
    if (item.kind !== "decode" || !("text" in item.input) || "any_of" in item.expect) continue;
    if (!bySender.has(item.sender)) bySender.set(item.sender, { valid: [], refused: [] });
    const group = bySender.get(item.sender);
    if (!item.expect.valid) group.refused.push(item.input.text);
    else if (!item.expect.unknown) group.valid.push(item.input.text);
  }
  return bySender;
}

/** How many of the texts the spec refuses a validator accepts. */
function accepted(texts, check) {
  let count = 0;
  for (const text of texts) {
    try {
      if (check(text)) count++;
    } catch {
      // refused
    }
  }
  return count;
}

const format = (n) => `${(n / 1000).toFixed(0).padStart(6)}k/s`;
const rows = [];
for (const protocol of ["brisvox", "ovp"]) {
  const binding = await load(`${protocol}/index.js`);
  const schema = JSON.parse(readFileSync(join(ROOT, "generated", "voxwire", protocol, "schema.json"), "utf8"));
  const ajv = new Ajv2020({ strict: false, validateFormats: false, allErrors: false });
  for (const [sender, { valid: texts, refused }] of vectors(protocol)) {
    const validate = ajv.compile({ $ref: `#/$defs/${SCHEMA_UNION[sender]}`, $defs: schema.$defs });
    const ajvLetsThrough = accepted(refused, (t) => validate(JSON.parse(t)));
    const decodeLetsThrough = accepted(refused, (t) => binding.decode(t, sender) !== undefined);
    const parse = rate((t) => JSON.parse(t), texts);
    const parseAjv = rate((t) => validate(JSON.parse(t)), texts);
    const decode = rate((t) => binding.decode(t, sender), texts);
    rows.push(
      `${protocol.padEnd(8)} ${sender.padEnd(7)} ${String(texts.length).padStart(5)} msgs  ` +
        `JSON.parse ${format(parse)}  +Ajv ${format(parseAjv)}  decode ${format(decode)}  ` +
        `decode/JSON.parse ${(decode / parse).toFixed(2)}  decode/(JSON.parse+Ajv) ${(decode / parseAjv).toFixed(2)}  ` +
        `refused vectors accepted: Ajv ${ajvLetsThrough}/${refused.length}, decode ${decodeLetsThrough}`,
    );
  }
}

const ovp = await load("ovp/index.js");
const frames = Array.from({ length: 64 }, (_, i) =>
  ovp.encodeFrame({ direction: 1, frame_seq: i, rtp_timestamp: i * 320, pcm: new Uint8Array(640).fill(i) }),
);
let sink = 0;
const bare = rate((bytes) => {
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  sink ^= view.getUint8(0) ^ view.getUint8(1) ^ view.getUint16(2, true) ^ view.getUint32(4, true) ^ view.getUint32(8, true);
  sink ^= bytes.subarray(12, 652).byteLength;
}, frames);
const decodeFrame = rate((bytes) => {
  sink ^= ovp.decodeFrame(bytes, 1).frame_seq;
}, frames);
const encodeFrame = rate((bytes) => {
  sink ^= ovp.encodeFrame({ direction: 1, frame_seq: 7, rtp_timestamp: 0, pcm: bytes.subarray(12) }).byteLength;
}, frames);

console.log(`TypeScript binding, node ${process.version}${quick ? " (--quick: short, noisy)" : ""}`);
for (const row of rows) console.log(row);
console.log(
  `frames   decodeFrame ${format(decodeFrame)}  bare DataView read ${format(bare)}  ` +
    `decodeFrame/bare ${(decodeFrame / bare).toFixed(2)}  encodeFrame ${format(encodeFrame)}`,
);
if (sink === 0.5) console.log(sink); // keeps the reads alive
