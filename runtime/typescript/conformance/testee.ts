#!/usr/bin/env node
/**
 * The TypeScript binding as a conformance testee: answers the requests of
 * `python -m voxwire.conformance --testee "node dist/conformance/testee.js"` on stdin, one JSON
 * line each way (docs/conformance.md, the testee protocol).
 */
import { createInterface } from "node:readline";

import * as brisvox from "../brisvox/index.js";
import { OvpClient, type WebSocketConstructor } from "../ovp/client.js";
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
  const type = (message as { type: string }).type;
  let written: string;
  try {
    written = binding.encode(message);
  } catch (exc) {
    if (exc instanceof VoxwireProtocolError) return { valid: true, type, encode_code: exc.code };
    return { error: `encode of the decoded message threw ${String(exc)}` };
  }
  // The text encode wrote is the answer's value as it is: a bigint read back by JSON.parse
  // would be rounded (see answerLine).
  const got: Answer = { valid: true, type, written };
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

// -- session cases: the OVP client side, driven through a scripted WebSocket ----------------------

type Listener = (event: never) => void;

/** A WebSocket whose peer is the case: it records what the client sends and how it closes. */
class ScriptedSocket {
  static made: ScriptedSocket[] = [];
  binaryType = "blob";
  readyState = 0;
  readonly sent: string[] = [];
  readonly closes: number[] = [];
  readonly protocol: string;
  private readonly listeners = new Map<string, Listener[]>();

  constructor(_url: string, protocols: string[]) {
    this.protocol = protocols[0] ?? "";
    ScriptedSocket.made.push(this);
  }

  addEventListener(type: string, listener: Listener): void {
    this.listeners.set(type, [...(this.listeners.get(type) ?? []), listener]);
  }

  send(data: unknown): void {
    if (typeof data === "string") this.sent.push(data);
  }

  close(code = 1000): void {
    this.closes.push(code);
  }

  emit(type: string, event: unknown): void {
    for (const listener of this.listeners.get(type) ?? []) (listener as (event: unknown) => void)(event);
  }
}

type Verdict = { [key: string]: unknown };
type Step = { [key: string]: unknown };

const tick = (): Promise<void> => new Promise((resolve) => setImmediate(resolve));

async function newSocket(count: number): Promise<ScriptedSocket> {
  const deadline = Date.now() + 5000;
  while (ScriptedSocket.made.length <= count) {
    if (Date.now() > deadline) throw new Error("the client opened no new connection");
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
  return ScriptedSocket.made[ScriptedSocket.made.length - 1] as ScriptedSocket;
}

/** The verdict of every step of an OVP client case, played through OvpClient. */
async function playClient(steps: readonly Step[]): Promise<Verdict[]> {
  const first = steps.find((step) => step["from"] === "server");
  const sessionId = String((JSON.parse(String(first?.["text"] ?? "{}")) as { session_id?: unknown }).session_id);
  ScriptedSocket.made = [];
  const client = new OvpClient({
    url: "ws://127.0.0.1:1",
    sessionId,
    token: "t",
    WebSocket: ScriptedSocket as unknown as WebSocketConstructor,
  });
  let delivered = 0;
  for (const message of ovp.OVP_SPEC.messages) {
    if (message.senders.includes("server")) client.on(message.type as ovp.ServerMessage["type"], () => delivered++);
  }
  client.connect().catch(() => undefined);
  await tick();
  let socket = await newSocket(0);
  socket.emit("open", {});
  const verdicts: Verdict[] = [];
  for (const step of steps) {
    if (step["link"] !== undefined) {
      if (step["link"] === "open") {
        socket = await newSocket(ScriptedSocket.made.length);
        socket.emit("open", {});
      } else {
        socket.emit("close", { code: step["link"] === "lost" ? 1006 : 1000, reason: "" });
      }
      verdicts.push({ verdict: "done" });
      continue;
    }
    const message = JSON.parse(String(step["text"])) as { [key: string]: unknown };
    if (step["from"] === "client") {
      if (message["type"] !== "session.resume") {
        const { type, seq: _seq, ts: _ts, session_id: _id, ...fields } = message;
        client.send(type as never, fields as never);
      }
      const sent = JSON.parse(socket.sent[socket.sent.length - 1] ?? "{}") as { type?: unknown; seq?: unknown };
      if (sent.type !== message["type"]) {
        verdicts.push({ verdict: "missing", detail: `the client sent ${String(sent.type)}` });
        continue;
      }
      verdicts.push(sent.seq === message["seq"] ? { verdict: "sent" } : { verdict: "sent", seq: sent.seq });
      continue;
    }
    const before = { delivered, problems: client.problems.length, over: client.outcome, closes: socket.closes.length };
    socket.emit("message", { data: step["text"] });
    const closed = socket.closes.length > before.closes ? socket.closes[socket.closes.length - 1] : undefined;
    const ended = before.over === null ? client.outcome : null;
    const problem = client.problems.length > before.problems ? client.problems[client.problems.length - 1] : undefined;
    const code = ended?.code ?? problem?.code;
    if (code !== undefined && code !== null) {
      verdicts.push(closed !== undefined ? { verdict: "error", code, close: closed } : { verdict: "error", code });
    } else if (closed !== undefined) verdicts.push({ verdict: "close", close: closed });
    else verdicts.push({ verdict: delivered > before.delivered ? "accepted" : "ignored" });
  }
  client.close();
  return verdicts;
}

async function answer(request: { [key: string]: unknown }): Promise<Answer> {
  if (request["kind"] === "session") {
    const id = request["id"];
    if (request["protocol"] !== "ovp" || request["side"] !== "client") {
      return { id, error: `this binding plays no ${String(request["protocol"])} ${String(request["side"])} side` };
    }
    try {
      return { id, steps: await playClient(request["steps"] as Step[]) };
    } catch (exc) {
      return { id, error: `the testee failed: ${String(exc)}` };
    }
  }
  return answerOne(request);
}

function answerOne(request: { [key: string]: unknown }): Answer {
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

/** One answer as a JSON line; a decoded message's `written` text becomes its `value` verbatim. */
function answerLine(out: Answer): string {
  const { written, ...rest } = out;
  if (typeof written !== "string") return JSON.stringify(out) + "\n";
  const head = JSON.stringify(rest);
  return `${head.slice(0, -1)}${head.length > 2 ? "," : ""}"value":${written}}\n`;
}

const lines = createInterface({ input: process.stdin, crlfDelay: Infinity });
let queue: Promise<void> = Promise.resolve();
lines.on("line", (line) => {
  if (!line.trim()) return;
  // One request at a time, in order: a session case takes a few timer turns.
  queue = queue.then(async () => {
    let out: Answer;
    try {
      const request = JSON.parse(line) as unknown;
      out =
        typeof request === "object" && request !== null && !Array.isArray(request)
          ? await answer(request as { [key: string]: unknown })
          : { id: null, error: "not an object" };
    } catch (exc) {
      out = { id: null, error: `not a JSON request: ${String(exc)}` };
    }
    process.stdout.write(answerLine(out));
  });
});
