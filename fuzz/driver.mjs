// The TypeScript side of `python -m fuzz --differential`: one long-running node process that
// reads one JSON line per input on stdin ({"target": "brisvox-agent", "b64": "..."}) and writes
// one JSON line per input on stdout with the TypeScript binding's answer:
//   {"valid": true, "type": ..., "text": <encode of the decoded message>}
//   {"valid": true, "type": ..., "encode_code": <the code encode refused it with>}
//   {"valid": false, "code": <the ProtocolError's code>}
//   {"escape": "<what was thrown that is not a ProtocolError>"}
// A refusal also carries the error's text as "detail", which is shown but not compared.
// Usage: node driver.mjs <the compiled package's dist folder>
import { createInterface } from "node:readline";
import { pathToFileURL } from "node:url";
import { join } from "node:path";

const dist = process.argv[2];
const load = (path) => import(pathToFileURL(join(dist, path)).href);
const brisvox = await load("brisvox/index.js");
const ovp = await load("ovp/index.js");
const { VoxwireProtocolError } = await load("runtime/errors.js");

const escape = (exc) => ({ escape: String(exc && exc.stack ? exc.stack.split("\n").slice(0, 3).join(" | ") : exc) });

function text(binding, bytes, sender) {
  let message;
  try {
    message = binding.decode(bytes, sender);
  } catch (exc) {
    if (exc instanceof VoxwireProtocolError) return { valid: false, code: exc.code, detail: exc.message };
    return escape(exc);
  }
  try {
    return { valid: true, type: message.type, text: binding.encode(message) };
  } catch (exc) {
    if (exc instanceof VoxwireProtocolError) return { valid: true, type: message.type, encode_code: exc.code, detail: exc.message };
    return escape(exc);
  }
}

function frame(bytes) {
  let decoded;
  try {
    decoded = ovp.decodeFrame(bytes);
  } catch (exc) {
    if (exc instanceof VoxwireProtocolError) return { valid: false, code: exc.code, detail: exc.message };
    return escape(exc);
  }
  try {
    return { valid: true, hex: Buffer.from(ovp.encodeFrame(decoded)).toString("hex") };
  } catch (exc) {
    if (exc instanceof VoxwireProtocolError) return { valid: true, encode_code: exc.code, detail: exc.message };
    return escape(exc);
  }
}

const TARGETS = {
  "brisvox-server": (b) => text(brisvox, b, "server"),
  "brisvox-agent": (b) => text(brisvox, b, "agent"),
  "ovp-server": (b) => text(ovp, b, "server"),
  "ovp-client": (b) => text(ovp, b, "client"),
  "ovp-frames": frame,
};

const out = [];
for await (const line of createInterface({ input: process.stdin, crlfDelay: Infinity })) {
  if (line === "") {
    process.stdout.write(out.join(""));
    out.length = 0;
    continue;
  }
  const { target, b64 } = JSON.parse(line);
  const bytes = new Uint8Array(Buffer.from(b64, "base64"));
  let answer;
  try {
    answer = TARGETS[target](bytes);
  } catch (exc) {
    answer = escape(exc);
  }
  out.push(JSON.stringify(answer) + "\n");
}
