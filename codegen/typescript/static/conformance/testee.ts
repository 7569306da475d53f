#!/usr/bin/env node
/**
 * The TypeScript binding as a conformance testee: answers the requests of
 * `python -m voxwire.conformance --testee "node dist/conformance/testee.js"` on stdin, one JSON
 * line each way (docs/conformance.md, the testee protocol).
 */
import { createInterface } from "node:readline";

import * as brisvox from "../brisvox/index.js";
import * as ovp from "../ovp/index.js";
import { VoxwireProtocolError } from "../runtime/errors.js";

type Answer = { [key: string]: unknown };

interface Binding {
  decode(data: Uint8Array | string, sender: string): object;
  encode(message: object): string;
  UnknownMessage: new (...args: never[]) => object;
}

const BINDINGS: { [id: string]: Binding } = {
  brisvox: brisvox as unknown as Binding,
  ovp: ovp as unknown as Binding,
};

function inputBytes(input: { [key: string]: unknown }): Uint8Array {
  const [key, value] = Object.entries(input)[0] ?? [];
  if (typeof value !== "string") throw new Error("input is one of text, base64 or hex");
  if (key === "text") return new TextEncoder().encode(value);
  if (key === "base64") return new Uint8Array(Buffer.from(value, "base64"));
  if (key === "hex") return new Uint8Array(Buffer.from(value, "hex"));
  throw new Error(`unknown input ${String(key)}`);
}

function decodeOne(binding: Binding, data: Uint8Array | string, sender: string): Answer {
  let message: object;
  try {
    message = binding.decode(data, sender);
  } catch (exc) {
    if (exc instanceof VoxwireProtocolError) return { valid: false, code: exc.code };
    return { error: `decode threw ${String(exc)} (not a ProtocolError)` };
  }
  let value: unknown;
  try {
    value = JSON.parse(binding.encode(message));
  } catch (exc) {
    return { error: `encode of the decoded message threw ${String(exc)}` };
  }
  const got: Answer = { valid: true, type: (message as { type: string }).type, value };
  if (message instanceof binding.UnknownMessage) got["unknown"] = true;
  return got;
}

function decode(binding: Binding, bytes: Uint8Array, sender: string, isText: boolean): Answer {
  const got = decodeOne(binding, bytes, sender);
  if (isText && !("error" in got)) {
    const again = decodeOne(binding, new TextDecoder("utf-8", { ignoreBOM: true }).decode(bytes), sender);
    if (JSON.stringify(again) !== JSON.stringify(got)) {
      return { error: `bytes and string inputs disagree: ${JSON.stringify(got)} vs ${JSON.stringify(again)}` };
    }
  }
  return got;
}

function frame(bytes: Uint8Array, sender: unknown): Answer {
  let expected: ovp.FrameDirection | undefined;
  if (sender !== undefined) {
    const entry = Object.entries(ovp.FrameDirection).find(([name]) =>
      name.toLowerCase().startsWith(`${String(sender)}_to_`),
    );
    if (entry === undefined) return { error: `no frame direction for sender ${String(sender)}` };
    expected = entry[1];
  }
  let decoded: ovp.AudioFrame;
  try {
    decoded = ovp.decodeFrame(bytes, expected);
  } catch (exc) {
    if (exc instanceof VoxwireProtocolError) return { valid: false, code: exc.code };
    return { error: `decodeFrame threw ${String(exc)} (not a ProtocolError)` };
  }
  const again = ovp.encodeFrame(decoded);
  if (Buffer.compare(Buffer.from(again), Buffer.from(bytes)) !== 0) {
    return { error: "encodeFrame(decodeFrame(b)) != b" };
  }
  const { pcm, ...header } = decoded;
  return { valid: true, header, payload_hex: Buffer.from(pcm).toString("hex") };
}

function answer(request: { [key: string]: unknown }): Answer {
  const id = request["id"];
  try {
    const binding = BINDINGS[String(request["protocol"])];
    if (binding === undefined) return { id, error: `unknown protocol ${String(request["protocol"])}` };
    const input = (request["input"] ?? {}) as { [key: string]: unknown };
    const bytes = inputBytes(input);
    if (request["kind"] === "decode") {
      return { id, ...decode(binding, bytes, String(request["sender"]), "text" in input) };
    }
    if (request["kind"] === "frame" && request["protocol"] === "ovp") {
      return { id, ...frame(bytes, request["sender"]) };
    }
    return { id, error: `kind ${String(request["kind"])} is not supported by this testee` };
  } catch (exc) {
    return { id, error: `the testee failed: ${String(exc)}` };
  }
}

const lines = createInterface({ input: process.stdin, crlfDelay: Infinity });
lines.on("line", (line) => {
  if (!line.trim()) return;
  let out: Answer;
  try {
    const request = JSON.parse(line) as unknown;
    out = typeof request === "object" && request !== null && !Array.isArray(request)
      ? answer(request as { [key: string]: unknown })
      : { id: null, error: "not an object" };
  } catch (exc) {
    out = { id: null, error: `not a JSON request: ${String(exc)}` };
  }
  process.stdout.write(JSON.stringify(out) + "\n");
});
