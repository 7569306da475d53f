/**
 * An OVP client over the WHATWG `WebSocket`: browsers, and Node 20 with the `ws` package (or
 * Node's own `WebSocket` where it has one).
 *
 * It offers the token-form subprotocol alias `voxwire.orbit-voice.1.0` (a browser cannot offer
 * `orbit-voice/1.0`: spec decision subprotocol-token-alias), takes `session.start`, then
 * exchanges events and 20 ms audio frames with the gateway. Every event it sends is stamped here
 * (`seq` +1 per event for the whole session, `ts`, `session_id`); every event it receives is
 * decoded exactly and judged (session.start first with seq 0, this session's id, no seq twice).
 * A dropped link is reconnected and resumed within the resume window: the gateway's replay is
 * delivered exactly once and in order.
 *
 * ```ts
 * const client = new OvpClient({ url: "wss://voice.example.com", sessionId, token });
 * client.on("transcript.final", (event) => console.log(event.text));
 * client.onAudio((frame) => play(frame.pcm));
 * const start = await client.connect();
 * client.send("agent.input", { source: "developer_inject", text: "Hi" });
 * client.sendAudio(pcm); // 640 bytes: 20 ms of 16 kHz PCM16LE
 * const outcome = await client.ended;
 * ```
 */
import { UnknownMessage, decode, encode } from "./codec.js";
import {
  CloseCode,
  ENDPOINT_PATH,
  FRAME_SEQ_MODULUS,
  MAX_SEQ,
  RECONNECT_BACKOFF_INITIAL_MS,
  RECONNECT_BACKOFF_MAX_MS,
  RESUME_WINDOW_MS,
  RTP_TIMESTAMP_MODULUS,
  SAMPLES_PER_FRAME,
  SUBPROTOCOL,
  SUBPROTOCOL_ALIAS,
  TOKEN_QUERY_PARAMETER,
} from "./constants.js";
import { ErrorCode, ProtocolError } from "./errors.js";
import { type AudioFrame, decodeFrame, encodeFrame } from "./frames.js";
import { type ClientMessage, FrameDirection, type ServerMessage, type SessionEnd, type SessionStart } from "./messages.js";
import { OVP_SPEC } from "./spec.js";

const SENT_BY = (sender: string): ReadonlySet<string> =>
  new Set(OVP_SPEC.messages.filter((m) => m.senders.includes(sender)).map((m) => m.type));
/** What each side may send (from the spec): the untyped path refuses the other side's types. */
const SERVER_TYPES = SENT_BY("server");
const CLIENT_TYPES = SENT_BY("client");

/** The part of the WHATWG `WebSocket` the client uses (browsers' and `ws`'s both have it). */
export interface WebSocketLike {
  binaryType: string;
  readonly protocol: string;
  readonly readyState: number;
  send(data: string | ArrayBufferView | ArrayBuffer): void;
  close(code?: number, reason?: string): void;
  addEventListener(type: "open", listener: () => void): void;
  addEventListener(type: "close", listener: (event: { code: number; reason: string }) => void): void;
  addEventListener(type: "error", listener: (event: unknown) => void): void;
  addEventListener(type: "message", listener: (event: { data: unknown }) => void): void;
}

export type WebSocketConstructor = new (url: string, protocols: string[]) => WebSocketLike;

/** A type the server sends, and the message of that type. */
export type ServerType = ServerMessage["type"];
export type ServerEvent<T extends ServerType> = Extract<ServerMessage, { type: T }>;
/** A type the client sends (session.resume excepted: the client sends it itself). */
export type ClientType = Exclude<ClientMessage["type"], "session.resume">;
type Envelope = "type" | "seq" | "ts" | "session_id";
/** The fields of a client event without its envelope, which the client stamps. */
export type ClientFields<T extends ClientType> = Omit<Extract<ClientMessage, { type: T }>, Envelope>;

export interface OvpClientOptions {
  /** The gateway's base URL: `wss://host` (`ws://` for a test gateway on this machine). */
  readonly url: string;
  readonly sessionId: string;
  /** The session's token, or a function that fetches a fresh one for each connection. */
  readonly token: string | (() => string | Promise<string>);
  /** The `WebSocket` class: the global one by default (pass `ws`'s in Node 20). */
  readonly WebSocket?: WebSocketConstructor;
  /** Offer `orbit-voice/1.0` exactly instead of the alias (only stacks that allow a `/`). */
  readonly exactSubprotocol?: boolean;
}

/** How the session ended: its `session.end` if the gateway sent one, else why it is over. */
export interface SessionOutcome {
  readonly end: SessionEnd | null;
  /** An error code when the session failed (`OVP_AUTH_FAILED`, `OVP_RESUME_EXPIRED`, ...). */
  readonly code: string | null;
  readonly detail: string;
}

/** The handshake failed: the gateway refused the upgrade or selected no OVP subprotocol. */
export class HandshakeError extends Error {
  constructor(
    message: string,
    readonly code: string | null,
  ) {
    super(message);
    this.name = "HandshakeError";
  }
}

type Handler = (message: never) => void;


/** One OVP session, across the connections that carry it (see the module comment). */
export class OvpClient {
  /** The session's `session.start`, once received. */
  start: SessionStart | null = null;
  /** The seq of the last server event delivered (replayed duplicates are dropped). */
  lastServerSeq: number | null = null;
  /** Server events and frames that broke the protocol after the start (each was skipped). */
  readonly problems: ProtocolError[] = [];
  /** Resolves once, when the session is over. */
  readonly ended: Promise<SessionOutcome>;

  private readonly options: OvpClientOptions;
  private readonly handlers = new Map<string, Handler[]>();
  private readonly audioHandlers: ((frame: AudioFrame) => void)[] = [];
  private socket: WebSocketLike | null = null;
  private linked = false;
  private closing = false;
  private over: SessionOutcome | null = null;
  private nextSeq = 0;
  private frameSeq = 0;
  private rtpTimestamp = 0;
  private lastFrameSeq: number | null = null;
  private droppedAt: number | null = null;
  private backoff: number = RECONNECT_BACKOFF_INITIAL_MS;
  private finish: (outcome: SessionOutcome) => void = () => undefined;
  private started: { resolve: (start: SessionStart) => void; reject: (error: Error) => void } | null = null;

  constructor(options: OvpClientOptions) {
    this.options = options;
    this.ended = new Promise((resolve) => {
      this.finish = resolve;
    });
  }

  /** How the session ended, once it is over (what `ended` resolves with), else `null`. */
  get outcome(): SessionOutcome | null {
    return this.over;
  }

  /** Whether events and audio can be sent now (linked, started, not over). */
  get live(): boolean {
    return this.linked && this.start !== null && this.over === null;
  }

  /** Call `handler` with every event of `type` the gateway sends (in order, exactly once). */
  on<T extends ServerType>(type: T, handler: (event: ServerEvent<T>) => void): this {
    if (!SERVER_TYPES.has(type)) throw new TypeError(`the gateway sends no ${JSON.stringify(type)}: a client handles only server events`);
    const list = this.handlers.get(type) ?? [];
    list.push(handler as Handler);
    this.handlers.set(type, list);
    return this;
  }

  /** Call `handler` with every audio frame of the gateway (its `pcm` is a view of the message). */
  onAudio(handler: (frame: AudioFrame) => void): this {
    this.audioHandlers.push(handler);
    return this;
  }

  /** Open the first connection; resolves with `session.start`. */
  connect(): Promise<SessionStart> {
    if (this.socket !== null || this.over !== null) return Promise.reject(new Error("connect() is called once"));
    return new Promise((resolve, reject) => {
      this.started = { resolve, reject };
      this.open().catch((exc: unknown) => this.handshakeFailed(new HandshakeError(String(exc), null)));
    });
  }

  /** Stamp, check and send one client event; returns it as sent. */
  send<T extends ClientType>(type: T, fields: ClientFields<T>): Extract<ClientMessage, { type: T }> {
    if ((type as string) === "session.resume") throw new TypeError("session.resume is sent by the client itself");
    if (!CLIENT_TYPES.has(type)) throw new TypeError(`a client does not send ${JSON.stringify(type)}`);
    if (!this.live) throw new Error("no live session: not connected, not started or over");
    return this.stamped(type, fields as object) as Extract<ClientMessage, { type: T }>;
  }

  /**
   * Send 20 ms of caller audio (640 bytes of PCM16LE); dropped while the link is down (audio is
   * never replayed), frame_seq advancing either way so the gap shows.
   */
  sendAudio(pcm: Uint8Array, flags = 0): void {
    if (this.start === null || this.over !== null) throw new Error("audio flows only between session.start and the end");
    const frame = encodeFrame({
      direction: FrameDirection.CLIENT_TO_SERVER,
      flags,
      frame_seq: this.frameSeq,
      rtp_timestamp: this.rtpTimestamp,
      pcm,
    });
    this.frameSeq = (this.frameSeq + 1) % FRAME_SEQ_MODULUS;
    this.rtpTimestamp = (this.rtpTimestamp + SAMPLES_PER_FRAME) % RTP_TIMESTAMP_MODULUS;
    if (this.linked && this.socket !== null) this.socket.send(frame);
  }

  /** Hang up: close with 1000 (the gateway keeps the session for the resume window). */
  close(): void {
    if (this.over !== null) return;
    this.closing = true;
    this.socket?.close(CloseCode.NORMAL, "closed by the client");
    this.end(null, null, "closed by the client");
  }

  // -- the connection ---------------------------------------------------------------------------

  private async open(): Promise<void> {
    const token = typeof this.options.token === "string" ? this.options.token : await this.options.token();
    const path = ENDPOINT_PATH.replace("{session_id}", encodeURIComponent(this.options.sessionId));
    const base = this.options.url.replace(/\/+$/, "");
    const url = `${base}${path}?${TOKEN_QUERY_PARAMETER}=${encodeURIComponent(token)}`;
    const Impl = this.options.WebSocket ?? (globalThis as { WebSocket?: WebSocketConstructor }).WebSocket;
    if (Impl === undefined) throw new Error("no WebSocket class: pass one (the ws package in Node 20)");
    const offered = this.options.exactSubprotocol ? SUBPROTOCOL : SUBPROTOCOL_ALIAS;
    const socket = new Impl(url, [offered]);
    socket.binaryType = "arraybuffer";
    this.socket = socket;
    let opened = false;
    socket.addEventListener("open", () => {
      opened = true;
      if (socket.protocol !== offered) {
        closeWith(socket, CloseCode.PROTOCOL_ERROR, "subprotocol mismatch");
        this.handshakeFailed(new HandshakeError(`the gateway selected ${JSON.stringify(socket.protocol)}, not ${offered}`, ErrorCode.OVP_SUBPROTOCOL_MISMATCH));
        return;
      }
      this.linked = true;
      this.droppedAt = null;
      this.backoff = RECONNECT_BACKOFF_INITIAL_MS;
      if (this.start !== null && this.lastServerSeq !== null) {
        this.stamped("session.resume", { last_server_seq: this.lastServerSeq });
      }
    });
    socket.addEventListener("message", (event) => {
      if (this.socket !== socket) return;
      if (typeof event.data === "string") this.receiveText(event.data);
      else if (event.data instanceof ArrayBuffer) this.receiveBinary(new Uint8Array(event.data));
      else if (ArrayBuffer.isView(event.data)) this.receiveBinary(new Uint8Array(event.data.buffer, event.data.byteOffset, event.data.byteLength));
    });
    socket.addEventListener("error", () => undefined); // the close event follows
    socket.addEventListener("close", (event) => {
      if (this.socket !== socket) return;
      this.linked = false;
      if (!opened && this.start === null) {
        this.handshakeFailed(new HandshakeError(`the upgrade failed (close ${event.code})`, null));
        return;
      }
      this.linkLost();
    });
  }

  private handshakeFailed(error: HandshakeError): void {
    this.end(null, error.code, error.message);
    this.started?.reject(error);
    this.started = null;
  }

  private linkLost(): void {
    if (this.over !== null || this.closing) return;
    if (this.start === null) {
      this.end(null, null, "the connection closed before session.start");
      return;
    }
    const now = Date.now();
    this.droppedAt ??= now;
    const deadline = this.droppedAt + RESUME_WINDOW_MS;
    const delay = Math.min(this.backoff, Math.max(0, deadline - now));
    this.backoff = Math.min(this.backoff * 2, RECONNECT_BACKOFF_MAX_MS);
    setTimeout(() => {
      if (this.over !== null || this.linked) return;
      if (Date.now() > deadline) {
        this.end(null, ErrorCode.OVP_RESUME_EXPIRED, "no connection resumed the session in time");
        return;
      }
      this.open().catch((exc: unknown) => this.end(null, null, String(exc)));
    }, delay);
  }

  // -- what the gateway sends -------------------------------------------------------------------

  private receiveText(data: string): void {
    if (this.over !== null) return;
    let message: ServerMessage | UnknownMessage;
    let seq: number;
    try {
      message = decode(data, "server");
      seq = this.envelopeSeq(message);
    } catch (exc) {
      if (!(exc instanceof ProtocolError)) throw exc;
      if (this.start === null) this.fail(exc.code, exc.message);
      else this.problems.push(exc);
      return;
    }
    if (this.start === null) {
      this.beforeStart(message, seq);
      return;
    }
    if (this.lastServerSeq !== null && seq <= this.lastServerSeq) return; // a replayed duplicate
    if (message.type === "session.start") {
      this.fail(ErrorCode.OVP_EVENT_SCHEMA_INVALID, "session.start again on a started session");
      return;
    }
    this.lastServerSeq = seq;
    if (message instanceof UnknownMessage) return; // forward compatibility: counted, not delivered
    this.deliver(message);
    if (message.type === "error" && !message.recoverable) {
      if (message.code === ErrorCode.OVP_AUTH_FAILED || message.code === ErrorCode.OVP_RESUME_EXPIRED) {
        this.end(null, message.code, message.message);
      }
    } else if (message.type === "session.end") {
      this.closing = true;
      this.socket?.close(CloseCode.NORMAL);
      this.end(message, typeof message.error_code === "string" ? message.error_code : null, message.reason);
    }
  }

  private beforeStart(message: ServerMessage | UnknownMessage, seq: number): void {
    if (message.type === "session.start" && !(message instanceof UnknownMessage)) {
      if (seq !== 0) {
        this.fail(ErrorCode.OVP_EVENT_SCHEMA_INVALID, `session.start has seq ${seq}, not 0`);
        return;
      }
      this.start = message;
      this.lastServerSeq = 0;
      this.deliver(message);
      this.started?.resolve(message);
      this.started = null;
      return;
    }
    if (message.type === "error" && !(message instanceof UnknownMessage)) {
      this.lastServerSeq = seq;
      this.deliver(message);
      this.handshakeFailed(new HandshakeError(message.message, message.code));
      return;
    }
    this.fail(ErrorCode.OVP_EVENT_SCHEMA_INVALID, `${message.type} before session.start`);
  }

  private envelopeSeq(message: ServerMessage | UnknownMessage): number {
    let seq: unknown;
    let sessionId: unknown;
    if (message instanceof UnknownMessage) {
      seq = message.data["seq"];
      sessionId = message.data["session_id"];
    } else {
      seq = message.seq;
      sessionId = message.session_id;
    }
    if (typeof seq !== "number" || !Number.isInteger(seq) || seq < 0 || seq > MAX_SEQ) {
      throw new ProtocolError(ErrorCode.OVP_EVENT_SCHEMA_INVALID, `seq is ${String(seq)}, not an integer in 0..${MAX_SEQ}`, "$.seq", message.type);
    }
    if (sessionId !== this.options.sessionId) {
      throw new ProtocolError(ErrorCode.OVP_EVENT_SCHEMA_INVALID, `the event names another session (${JSON.stringify(sessionId)})`, "$.session_id", message.type);
    }
    return seq;
  }

  private receiveBinary(data: Uint8Array): void {
    if (this.start === null || this.over !== null) return;
    let frame: AudioFrame;
    try {
      frame = decodeFrame(data, FrameDirection.SERVER_TO_CLIENT);
    } catch (exc) {
      if (exc instanceof ProtocolError) this.problems.push(exc);
      else throw exc;
      return;
    }
    if (this.lastFrameSeq !== null) {
      const step = (frame.frame_seq - this.lastFrameSeq + FRAME_SEQ_MODULUS) % FRAME_SEQ_MODULUS;
      if (step === 0 || step >= FRAME_SEQ_MODULUS / 2) {
        this.problems.push(new ProtocolError(ErrorCode.OVP_SEQ_REGRESSION, `frame_seq ${frame.frame_seq} after ${this.lastFrameSeq}`, "frame"));
        return;
      }
    }
    this.lastFrameSeq = frame.frame_seq;
    for (const handler of this.audioHandlers) handler(frame);
  }

  private deliver(message: ServerMessage): void {
    for (const handler of this.handlers.get(message.type) ?? []) (handler as (event: ServerMessage) => void)(message);
  }

  // -- what the client sends --------------------------------------------------------------------

  private stamped(type: string, fields: object): ClientMessage {
    if (this.nextSeq > MAX_SEQ) {
      this.closing = true;
      this.socket?.close(CloseCode.NORMAL, "seq exhausted");
      this.end(null, null, "seq exhausted");
      throw new Error("seq exhausted");
    }
    const message = {
      type,
      seq: this.nextSeq,
      ts: new Date().toISOString(),
      session_id: this.options.sessionId,
      ...fields,
    } as ClientMessage;
    const text = encode(message); // throws ProtocolError for a field the spec refuses
    this.nextSeq++;
    this.socket?.send(text);
    return message;
  }

  private fail(code: string, detail: string): void {
    this.closing = true;
    if (this.socket !== null) closeWith(this.socket, CloseCode.PROTOCOL_ERROR, "protocol violation");
    this.end(null, code, detail);
    this.started?.reject(new HandshakeError(detail, code));
    this.started = null;
  }

  private end(end: SessionEnd | null, code: string | null, detail: string): void {
    if (this.over !== null) return;
    this.over = { end, code, detail };
    this.finish(this.over);
  }
}

/**
 * Close with `code`, or with 1000 and the reason where the WebSocket refuses the code (a
 * browser's accepts only 1000 and 3000-4999: spec decision browser-client-protocol-error-close).
 */
function closeWith(socket: WebSocketLike, code: number, reason: string): void {
  try {
    socket.close(code, reason);
  } catch {
    socket.close(CloseCode.NORMAL, reason);
  }
}
