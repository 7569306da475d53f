#!/usr/bin/env node
/**
 * The TypeScript binding as a conformance testee: answers the requests of
 * `python -m voxwire.conformance --testee "node dist/conformance/testee.js"` on stdin, one JSON
 * line each way (docs/conformance.md, the testee protocol).
 */
import { createInterface } from "node:readline";

import * as brisvox from "../brisvox/index.js";
import { type Clock, OvpClient, SessionFailed, SessionStateError, type WebSocketConstructor } from "../ovp/client.js";
import * as ovp from "../ovp/index.js";
import { VoxwireProtocolError } from "../runtime/errors.js";
import { traced } from "../runtime/machine.js";

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
  bufferedAmount = 0;
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
    if (type === "open") this.readyState = 1;
    if (type === "close") this.readyState = 3;
    for (const listener of this.listeners.get(type) ?? []) (listener as (event: unknown) => void)(event);
  }
}

/** The case's clock: time moves only to each step's `t`, firing the client's timers due by then. */
class CaseClock implements Clock {
  private time: number;
  private nextId = 1;
  private readonly timers = new Map<number, { readonly at: number; readonly callback: () => void }>();

  constructor(start: number) {
    this.time = start;
  }

  now(): number {
    return this.time;
  }

  setTimeout(callback: () => void, ms: number): unknown {
    const id = this.nextId++;
    this.timers.set(id, { at: this.time + ms, callback });
    return id;
  }

  clearTimeout(handle: unknown): void {
    this.timers.delete(handle as number);
  }

  /** Fire every timer due at or before `until`, in time order, then stand at `until`. */
  async advance(until: number): Promise<void> {
    while (await this.fireNext(until)) {
      // each timer may set others, due by `until` too
    }
    this.time = Math.max(this.time, until);
  }

  /** Fire the earliest timer (due by `until`); whether there was one. */
  async fireNext(until = Infinity): Promise<boolean> {
    let first: [number, { readonly at: number; readonly callback: () => void }] | undefined;
    for (const entry of this.timers) if (first === undefined || entry[1].at < first[1].at) first = entry;
    if (first === undefined || first[1].at > until) return false;
    this.timers.delete(first[0]);
    this.time = Math.max(this.time, first[1].at);
    first[1].callback();
    await tick();
    return true;
  }
}

type Verdict = { [key: string]: unknown };
type Step = { [key: string]: unknown };

const tick = (): Promise<void> => new Promise((resolve) => setImmediate(resolve));
const ENVELOPE = new Set(["type", "seq", "ts", "session_id"]);

function own(message: { [key: string]: unknown }): { [key: string]: unknown } {
  return Object.fromEntries(Object.entries(message).filter(([key]) => !ENVELOPE.has(key)));
}

/** OvpClient with the one shortcut a case takes: the next seq (a case's `next_seq` step). */
class CaseClient extends OvpClient {
  skipSeq(seq: number): void {
    this.core.skipSeq(seq);
  }
}

/** What the client did on a step: its socket closes, its outcome, its deliveries and problems. */
interface Seen {
  readonly linked: boolean;
  readonly socket: ScriptedSocket | undefined;
  readonly closes: number;
  readonly over: boolean;
  readonly delivered: number;
  readonly problems: number;
}

/** The verdict of every step of an OVP client case, played through OvpClient (docs/conformance.md). */
async function playClient(steps: readonly Step[]): Promise<Verdict[]> {
  const named = steps.find((step) => step["from"] === "server" && typeof step["text"] === "string");
  const sessionId = String((JSON.parse(String(named?.["text"] ?? "{}")) as { session_id?: unknown }).session_id ?? "ovps_case");
  const clock = new CaseClock(Number(steps[0]?.["t"] ?? 0) * 1000);
  ScriptedSocket.made = [];
  const client = new CaseClient({
    url: "ws://127.0.0.1:1",
    sessionId,
    token: "t",
    WebSocket: ScriptedSocket as unknown as WebSocketConstructor,
    clock,
  });
  let delivered = 0;
  for (const message of ovp.OVP_SPEC.messages) {
    if (message.senders.includes("server")) client.on(message.type as ovp.ServerMessage["type"], () => delivered++);
  }
  client.onAudio(() => delivered++);
  const current = (): ScriptedSocket | undefined => ScriptedSocket.made[ScriptedSocket.made.length - 1];
  const seen = (): Seen => {
    const socket = current();
    const linked = client.state === "starting" || client.state === "live" || client.state === "failing";
    return { linked, socket, closes: socket?.closes.length ?? 0, over: client.outcome !== null, delivered, problems: client.problems.length };
  };
  // A case begins on a connection when its first step is a message, else before any.
  if (steps[0]?.["from"] !== undefined) await opened(client, clock);
  const verdicts: Verdict[] = [];
  for (const step of steps) {
    const before = seen();
    await clock.advance(Number(step["t"]) * 1000);
    if (step["link"] !== undefined) verdicts.push(await linkStep(client, clock, String(step["link"])));
    else if (step["from"] === "client") verdicts.push(await sendStep(client, current(), step));
    else if (step["from"] === "server") {
      const socket = current();
      const at = seen();
      if (typeof step["binary"] === "string") {
        const bytes = Buffer.from(step["binary"], "base64");
        socket?.emit("message", { data: bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.byteLength) });
      } else socket?.emit("message", { data: step["text"] });
      verdicts.push(judged(client, at, seen(), delivered));
    } else if (step["call"] === "hang_up") {
      client.close();
      verdicts.push(after(client, before, seen()));
    } else if (step["wait"] === true) verdicts.push(after(client, before, seen()));
    else if (typeof step["next_seq"] === "number") {
      client.skipSeq(step["next_seq"]);
      verdicts.push({ verdict: "done" });
    } else throw new Error(`a step the client plays none of: ${JSON.stringify(step)}`);
  }
  client.close();
  return verdicts;
}

/** The client's first connection: connect() and the socket opened. */
async function opened(client: OvpClient, clock: CaseClock): Promise<void> {
  client.connect().catch(() => undefined);
  (await attempt(client, clock))?.emit("open", {});
}

/** The connection the client is opening (made, neither opened nor failed), after its timers. */
async function attempt(client: OvpClient, clock: CaseClock): Promise<ScriptedSocket | undefined> {
  const pending = (): ScriptedSocket | undefined => ScriptedSocket.made.find((socket) => socket.readyState === 0);
  for (let turns = 0; pending() === undefined && client.state !== "over" && turns < 100; turns++) {
    if (!(await clock.fireNext())) await tick();
  }
  return pending();
}

/** A link event: the client's connection opened (a new one: after its backoff), failed, or lost. */
async function linkStep(client: OvpClient, clock: CaseClock, event: string): Promise<Verdict> {
  const socket = ScriptedSocket.made[ScriptedSocket.made.length - 1];
  const linked = client.state === "starting" || client.state === "live" || client.state === "failing";
  if (event === "lost" || event === "closed" || (event === "open" && linked)) {
    // A new link while this one is up: the client saw it drop first (a half-open link).
    socket?.emit("close", { code: event === "closed" ? 1000 : 1006, reason: "" });
    if (event !== "open") return { verdict: "done" };
  }
  if (client.state === "idle" && event === "open") {
    await opened(client, clock);
    return { verdict: "done" };
  }
  if (client.state !== "dropped") return { verdict: "refused" }; // no connection after its end
  const next = await attempt(client, clock);
  if (next === undefined) return { verdict: "refused" };
  if (event === "failed") next.emit("close", { code: 1006, reason: "" });
  else next.emit("open", {});
  return { verdict: "done" };
}

/** As the Python player judges ClientCore receiving a message: a rejected message, or an end with
 * a code that the client closed the link for, is an error; else a message handed on, or dropped. */
function judged(client: OvpClient, before: Seen, now: Seen, delivered: number): Verdict {
  const closed = now.closes > before.closes ? before.socket?.closes[before.closes] : undefined;
  const problem = now.problems > before.problems ? client.problems[before.problems] : undefined;
  const ended = !before.over && now.over ? client.outcome : null;
  const code = problem?.code ?? (ended?.code != null && closed !== undefined ? ended.code : undefined);
  if (code !== undefined) return closed !== undefined ? { verdict: "error", code, close: closed } : { verdict: "error", code };
  return { verdict: delivered > before.delivered ? "accepted" : "ignored" };
}

/** What the client did on a call or as time passed: ended the session with a code it reports,
 * closed its link (when one was up), or nothing on the wire. */
function after(client: OvpClient, before: Seen, now: Seen): Verdict {
  const shut = before.linked && now.socket === before.socket && now.closes > before.closes;
  const closed = shut ? before.socket?.closes[before.closes] : undefined;
  const ended = !before.over && now.over ? client.outcome : null;
  if (ended?.code != null) return closed !== undefined ? { verdict: "error", code: ended.code, close: closed } : { verdict: "error", code: ended.code };
  return closed !== undefined ? { verdict: "close", close: closed } : { verdict: "done" };
}

/** The client's own message of a step, sent through its API (session.resume it sends itself). */
async function sendStep(client: OvpClient, socket: ScriptedSocket | undefined, step: Step): Promise<Verdict> {
  if (typeof step["binary"] === "string") {
    const frame = ovp.decodeFrame(new Uint8Array(Buffer.from(step["binary"], "base64")), ovp.FrameDirection.CLIENT_TO_SERVER);
    try {
      client.sendAudio(frame.pcm, frame.flags);
    } catch (exc) {
      if (exc instanceof SessionStateError) return { verdict: "refused" };
      throw exc;
    }
    return { verdict: "sent" };
  }
  const message = JSON.parse(String(step["text"])) as { [key: string]: unknown };
  let sent: { [key: string]: unknown } | undefined;
  if (message["type"] === "session.resume") {
    const texts = (socket?.sent ?? []).map((text) => JSON.parse(text) as { [key: string]: unknown });
    sent = texts.find((text) => text["type"] === "session.resume");
    if (sent === undefined) return { verdict: "refused" }; // no reconnect sent one
    if (JSON.stringify(own(sent)) !== JSON.stringify(own(message))) return { verdict: "sent", fields: own(sent) };
  } else {
    if (!client.live) return { verdict: "refused" }; // it would wait for a live link (queued)
    const closes = socket?.closes.length ?? 0;
    try {
      sent = (await client.send(message["type"] as never, own(message) as never)) as unknown as { [key: string]: unknown };
    } catch (exc) {
      const closed = socket !== undefined && socket.closes.length > closes ? socket.closes[closes] : undefined;
      if (exc instanceof SessionFailed && closed !== undefined) return { verdict: "close", close: closed }; // its seq's bound
      if (exc instanceof VoxwireProtocolError || exc instanceof SessionStateError || exc instanceof SessionFailed || exc instanceof TypeError) {
        return { verdict: "refused" };
      }
      throw exc;
    }
  }
  return sent["seq"] === message["seq"] ? { verdict: "sent" } : { verdict: "sent", seq: sent["seq"] };
}

async function answer(request: { [key: string]: unknown }): Promise<Answer> {
  if (request["kind"] === "session") {
    const id = request["id"];
    if (request["protocol"] !== "ovp" || request["side"] !== "client") {
      return { id, error: `this binding plays no ${String(request["protocol"])} ${String(request["side"])} side` };
    }
    const trace = traced();
    try {
      const steps = await playClient(request["steps"] as Step[]);
      // The transitions taken, once each in their order (the runner checks the case's claims).
      const taken = [...new Set(trace.taken.map((t) => `${t.role} ${t.state}.${t.input}`))];
      return { id, steps, taken };
    } catch (exc) {
      return { id, error: `the testee failed: ${String(exc)}` };
    } finally {
      trace.stop();
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
