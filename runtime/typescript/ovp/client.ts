/**
 * An OVP client over the WHATWG `WebSocket`: browsers, and Node 20 with the `ws` package (or
 * Node's own `WebSocket` where it has one).
 *
 * It offers the token-form subprotocol alias `voxwire.orbit-voice.1.0` (a browser cannot offer
 * `orbit-voice/1.0`: spec decision subprotocol-token-alias), takes `session.start`, then
 * exchanges events and 20 ms audio frames with the gateway. The session's rules are the sans-I/O
 * `ClientCore` (its state is the spec's client machine); this adapter owns the sockets, the
 * timers and the back-pressure:
 *
 * - a dropped link, or one silent for longer than `CLIENT_IDLE_TIMEOUT_MS` (a browser sees no
 *   pings: decision client-idle-bound), is reconnected and resumed within the resume window; the
 *   gateway's replay is delivered exactly once and in order, and a `session.start` on a resumed
 *   link (a gateway that lost the session) ends the session with `OVP_RESUME_EXPIRED`;
 * - `sendAudio` writes a frame only while the socket's `bufferedAmount` is at most
 *   `CLIENT_SEND_BUFFER_MAX_BYTES`, else drops it and returns `false`; `send` writes an event under
 *   the same bound, else queues it (at most `CLIENT_SEND_QUEUE_MAX_EVENTS`, also while the link
 *   is resumed) and throws `SendQueueFull` past that (decisions client-back-pressure and
 *   client-send-during-resume).
 *
 * ```ts
 * const client = new OvpClient({ url: "wss://voice.example.com", sessionId, token });
 * client.on("transcript.final", (event) => console.log(event.text));
 * client.onAudio((frame) => play(frame.pcm));
 * const start = await client.connect();
 * await client.send("agent.input", { source: "developer_inject", text: "Hi" });
 * client.sendAudio(pcm); // 640 bytes: 20 ms of 16 kHz PCM16LE; false when dropped
 * const outcome = await client.ended;
 * ```
 */
import { ClientCore, type ClientOutput, type ClientState, SERVER_TYPES, type SessionOutcome, unreachable } from "./client_core.js";
import {
  CLIENT_SEND_BUFFER_MAX_BYTES,
  CLIENT_SEND_QUEUE_MAX_EVENTS,
  CloseCode,
  ENDPOINT_PATH,
  FRAME_MS,
  OPEN_TIMEOUT_MS,
  RECONNECT_BACKOFF_INITIAL_MS,
  RECONNECT_BACKOFF_MAX_MS,
  SUBPROTOCOL,
  SUBPROTOCOL_ALIAS,
  TOKEN_QUERY_PARAMETER,
} from "./constants.js";
import { ErrorCode, type ProtocolError } from "./errors.js";
import type { AudioFrame } from "./frames.js";
import type { ClientMessage, ServerMessage, SessionStart } from "./messages.js";
import { type Clock, SYSTEM_CLOCK } from "../runtime/clock.js";
import { SessionStateError } from "../runtime/machine.js";

export type { ClientState, SessionOutcome } from "./client_core.js";
export { type Clock, SYSTEM_CLOCK } from "../runtime/clock.js";
export { SessionStateError } from "../runtime/machine.js";

/** The part of the WHATWG `WebSocket` the client uses (browsers' and `ws`'s both have it). */
export interface WebSocketLike {
  binaryType: string;
  readonly protocol: string;
  readonly readyState: number;
  /** Bytes handed to `send` and not yet sent on the network. */
  readonly bufferedAmount: number;
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
  /** The clock of every timer (open timeout, idle bound, backoff, resume window). */
  readonly clock?: Clock;
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

/** The session is over without `session.end` (refused, expired, broken), or over already. */
export class SessionFailed extends Error {
  constructor(
    readonly code: string | null,
    readonly detail: string,
  ) {
    super(code !== null ? `${code}: ${detail}` : detail);
    this.name = "SessionFailed";
  }
}

/** `send` found the client's queue at its bound (`CLIENT_SEND_QUEUE_MAX_EVENTS`): not sent. */
export class SendQueueFull extends Error {
  readonly bound = CLIENT_SEND_QUEUE_MAX_EVENTS;

  constructor(state: ClientState) {
    super(`${CLIENT_SEND_QUEUE_MAX_EVENTS} events wait already (the link is ${state}): not sent (decision client-send-during-resume)`);
    this.name = "SendQueueFull";
  }
}

type Handler = (message: never) => void;
interface Pending {
  readonly type: string;
  readonly fields: object;
  readonly resolve: (message: ClientMessage) => void;
  readonly reject: (error: Error) => void;
}
const OPEN = 1;

/** One OVP session, across the connections that carry it (see the module comment). */
export class OvpClient {
  /** Server events and frames that broke the protocol after the start (each was skipped). */
  readonly problems: ProtocolError[] = [];
  /** Resolves once, when the session is over. */
  readonly ended: Promise<SessionOutcome>;
  /** Audio frames dropped: the link was down or `bufferedAmount` over its bound. */
  audioDropped = 0;
  /** Server messages dropped as the protocol says (replayed duplicates, unknown types). */
  ignored = 0;
  /** Connections that resumed the session. */
  reconnects = 0;

  private readonly options: OvpClientOptions;
  private readonly clock: Clock;
  /** The session's rules (`ovp/client_core.ts`): a subclass may read it, as the testee does. */
  protected readonly core: ClientCore;
  private readonly handlers = new Map<string, Handler[]>();
  private readonly audioHandlers: ((frame: AudioFrame) => void)[] = [];
  private readonly queue: Pending[] = [];
  private socket: WebSocketLike | null = null;
  private attempting = false;
  private flushing = false;
  private resumeBy = 0;
  private backoff: number = RECONNECT_BACKOFF_INITIAL_MS;
  private timer: unknown = null;
  private timerAt = Infinity;
  private reconnectTimer: unknown = null;
  private flushTimer: unknown = null;
  private finish: (outcome: SessionOutcome) => void = () => undefined;
  private started: { resolve: (start: SessionStart) => void; reject: (error: Error) => void } | null = null;

  constructor(options: OvpClientOptions) {
    this.options = options;
    this.clock = options.clock ?? SYSTEM_CLOCK;
    this.core = new ClientCore(options.sessionId);
    this.ended = new Promise((resolve) => {
      this.finish = resolve;
    });
  }

  /** Where the session is: a state of the spec's client machine (`live` while events flow). */
  get state(): ClientState {
    return this.core.state;
  }

  /** Whether events and audio are written now (started, linked, not over). */
  get live(): boolean {
    return this.core.live;
  }

  /** The session's `session.start`, once received. */
  get start(): SessionStart | null {
    return this.core.sessionStart;
  }

  /** The seq of the last server event delivered (replayed duplicates are dropped). */
  get lastServerSeq(): number | null {
    return this.core.lastServerSeq;
  }

  /** How the session ended, once it is over (what `ended` resolves with), else `null`. */
  get outcome(): SessionOutcome | null {
    return this.core.outcome;
  }

  /** Events `send` queued and not yet written (at most `CLIENT_SEND_QUEUE_MAX_EVENTS`). */
  get queuedEvents(): number {
    return this.queue.length;
  }

  /** The current socket's `bufferedAmount` (0 without a link). */
  get bufferedAmount(): number {
    return this.socket?.bufferedAmount ?? 0;
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
    if (this.core.state !== "idle" || this.attempting) return Promise.reject(new SessionStateError("connect() is called once"));
    return new Promise((resolve, reject) => {
      this.started = { resolve, reject };
      this.attempt();
    });
  }

  /**
   * Stamp, check and send one client event; resolves with it as written. Written at once while the
   * session is live and `bufferedAmount` within its bound, else queued (stamped when written,
   * after a resume's `session.resume`). Throws `TypeError` for a type the client does not send,
   * `ProtocolError` for a field the spec refuses, `SessionStateError` before `connect()`,
   * `SessionFailed` once the session is over, `SendQueueFull` at the queue's bound; the promise
   * rejects with `SessionFailed` if the session ends before the event was written.
   */
  send<T extends ClientType>(type: T, fields: ClientFields<T>): Promise<Extract<ClientMessage, { type: T }>> {
    this.core.check(type, fields);
    const state = this.core.state;
    if (state === "over") throw this.failure();
    if (state === "idle") throw new SessionStateError("no session yet: call connect() first");
    if (this.queue.length === 0 && this.writable()) {
      return Promise.resolve(this.sendNow(type, fields) as Extract<ClientMessage, { type: T }>);
    }
    if (this.queue.length >= CLIENT_SEND_QUEUE_MAX_EVENTS) throw new SendQueueFull(state);
    const sent = new Promise<ClientMessage>((resolve, reject) => {
      this.queue.push({ type, fields, resolve, reject });
    });
    sent.catch(() => undefined); // the outcome tells a caller that does not wait for it
    this.armFlush();
    return sent as Promise<Extract<ClientMessage, { type: T }>>;
  }

  /**
   * Send 20 ms of caller audio (640 bytes of PCM16LE); `false` when the frame is dropped: the link
   * is down (audio is never replayed) or `bufferedAmount` is over `CLIENT_SEND_BUFFER_MAX_BYTES`
   * (counted in `audioDropped`). frame_seq advances either way, so the gap shows. The frame's
   * `rtp_timestamp` is `rtpTimestamp` when given (the sender's media clock), else 320 past the
   * last frame's.
   */
  sendAudio(pcm: Uint8Array, flags = 0, rtpTimestamp?: number): boolean {
    const out = this.core.sendAudio(pcm, flags, rtpTimestamp ?? null);
    if (out.length === 0) {
      this.audioDropped++;
      return false;
    }
    return this.perform(out);
  }

  /** Hang up: close with 1000 (the gateway keeps the session for the resume window). */
  close(): void {
    this.perform(this.core.close());
  }

  // -- the connection ---------------------------------------------------------------------------

  private attempt(): void {
    this.attempting = true;
    let token: string | Promise<string>;
    try {
      token = typeof this.options.token === "string" ? this.options.token : this.options.token();
    } catch (exc) {
      this.attemptFailed(`the token could not be had: ${String(exc)}`);
      return;
    }
    Promise.resolve(token).then(
      (value) => this.open(value),
      (exc: unknown) => this.attemptFailed(`the token could not be had: ${String(exc)}`),
    );
  }

  private open(token: string): void {
    if (this.core.state === "over") return;
    const Impl = this.options.WebSocket ?? (globalThis as { WebSocket?: WebSocketConstructor }).WebSocket;
    if (Impl === undefined) {
      this.attemptFailed("no WebSocket class: pass one (the ws package in Node 20)");
      return;
    }
    const path = ENDPOINT_PATH.replace("{session_id}", encodeURIComponent(this.options.sessionId));
    const url = `${this.options.url.replace(/\/+$/, "")}${path}?${TOKEN_QUERY_PARAMETER}=${encodeURIComponent(token)}`;
    const offered = this.options.exactSubprotocol ? SUBPROTOCOL : SUBPROTOCOL_ALIAS;
    let socket: WebSocketLike;
    try {
      socket = new Impl(url, [offered]);
    } catch (exc) {
      this.attemptFailed(`the WebSocket could not be made: ${String(exc)}`);
      return;
    }
    socket.binaryType = "arraybuffer";
    let opened = false;
    const timeout = this.clock.setTimeout(() => {
      if (opened || this.socket !== socket) return;
      this.socket = null;
      closeWith(socket, CloseCode.NORMAL, "open timeout");
      this.attemptFailed(`no connection within ${OPEN_TIMEOUT_MS} ms`);
    }, OPEN_TIMEOUT_MS);
    this.socket = socket;
    socket.addEventListener("open", () => {
      opened = true;
      this.clock.clearTimeout(timeout);
      if (this.socket !== socket) return;
      this.attempting = false;
      if (socket.protocol !== offered) {
        this.socket = null;
        closeWith(socket, CloseCode.PROTOCOL_ERROR, "subprotocol mismatch");
        this.handshakeFailed(`the gateway selected ${JSON.stringify(socket.protocol)}, not ${offered}`, ErrorCode.OVP_SUBPROTOCOL_MISMATCH);
        return;
      }
      if (this.core.state === "over") {
        this.socket = null; // the window closed, or the application hung up, meanwhile
        closeWith(socket, CloseCode.NORMAL, "the session is over");
        return;
      }
      if (this.core.state === "dropped") this.reconnects++;
      this.backoff = RECONNECT_BACKOFF_INITIAL_MS;
      this.perform(this.core.connected(this.clock.now()));
    });
    socket.addEventListener("message", (event) => {
      if (this.socket !== socket) return; // a link the client is done with
      const now = this.clock.now();
      const data = event.data;
      if (typeof data === "string") this.perform(this.core.receiveText(data, now));
      else if (data instanceof ArrayBuffer) this.perform(this.core.receiveBinary(new Uint8Array(data), now));
      else if (ArrayBuffer.isView(data)) this.perform(this.core.receiveBinary(new Uint8Array(data.buffer, data.byteOffset, data.byteLength), now));
    });
    socket.addEventListener("error", () => undefined); // the close event follows
    socket.addEventListener("close", (event) => {
      this.clock.clearTimeout(timeout);
      if (this.socket !== socket) return;
      this.socket = null;
      if (!opened) this.attemptFailed(`the upgrade failed (close ${event.code})`);
      else this.perform(this.core.linkLost(this.clock.now(), `the link closed (${event.code})`));
    });
  }

  /** An attempt made no link: the first ends the session, a reconnect is tried again. */
  private attemptFailed(detail: string): void {
    this.attempting = false;
    if (this.core.state === "idle") this.handshakeFailed(detail, null);
    else if (this.core.state === "dropped") this.retry();
  }

  /** The gateway refused the link (first connection, or a reconnect): the session is over. */
  private handshakeFailed(detail: string, code: string | null): void {
    const started = this.started;
    this.started = null;
    this.perform(this.core.close(detail, code));
    started?.reject(new HandshakeError(detail, code));
  }

  /** The next reconnect, after the backoff (the core gives up when the window closes). */
  private retry(): void {
    if (this.reconnectTimer !== null || this.attempting) return;
    const delay = Math.min(this.backoff, Math.max(0, this.resumeBy - this.clock.now()));
    this.backoff = Math.min(this.backoff * 2, RECONNECT_BACKOFF_MAX_MS);
    this.reconnectTimer = this.clock.setTimeout(() => {
      this.reconnectTimer = null;
      if (this.core.state === "dropped") this.attempt();
    }, delay);
  }

  // -- what the core says -----------------------------------------------------------------------

  /** Carry out the core's output, in order; `false` when an audio frame was dropped. */
  private perform(out: readonly ClientOutput[]): boolean {
    let written = true;
    for (const item of out) {
      switch (item.kind) {
        case "send":
          this.socket?.send(item.data);
          break;
        case "send_frame":
          written = this.writeFrame(item.data) && written;
          break;
        case "close": {
          const socket = this.socket;
          this.socket = null;
          if (socket !== null) closeWith(socket, item.code, item.reason);
          break;
        }
        case "event":
          this.deliver(item.message);
          break;
        case "audio":
          for (const handler of this.audioHandlers) guarded(handler, item.frame);
          break;
        case "rejected":
          this.problems.push(item.error);
          break;
        case "ignored":
          this.ignored++;
          break;
        case "dropped":
          this.resumeBy = item.resumeBy;
          this.retry();
          break;
        case "over":
          this.over(item.outcome);
          break;
        default:
          unreachable(item);
      }
    }
    if (this.queue.length > 0 && this.core.live && !this.flushing) this.flush();
    this.arm();
    return written;
  }

  private deliver(message: ServerMessage): void {
    for (const handler of this.handlers.get(message.type) ?? []) guarded(handler as (event: ServerMessage) => void, message);
    if (message.type === "session.start" && this.started !== null) {
      this.started.resolve(message);
      this.started = null;
    }
  }

  private over(outcome: SessionOutcome): void {
    const attempt = this.socket;
    if (attempt !== null && attempt.readyState !== OPEN) {
      this.socket = null; // a reconnect still opening: abandoned with the session
      closeWith(attempt, CloseCode.NORMAL, "the session is over");
    }
    for (const timer of [this.timer, this.reconnectTimer, this.flushTimer]) {
      if (timer !== null) this.clock.clearTimeout(timer);
    }
    this.timer = this.reconnectTimer = this.flushTimer = null;
    this.timerAt = Infinity;
    const failure = this.failure();
    for (const pending of this.queue.splice(0)) pending.reject(failure);
    if (this.started !== null) {
      this.started.reject(failure);
      this.started = null;
    }
    this.finish(outcome);
  }

  /** One timer for the core's next deadline (open timeout, idle bound, resume window). */
  private arm(): void {
    const deadline = this.core.nextDeadline();
    if (deadline === null || deadline < this.timerAt) {
      if (this.timer !== null) this.clock.clearTimeout(this.timer);
      this.timer = null;
      this.timerAt = Infinity;
    }
    if (deadline === null || this.timer !== null) return; // a sooner timer ticks and re-arms
    this.timerAt = deadline;
    this.timer = this.clock.setTimeout(() => {
      this.timer = null;
      this.timerAt = Infinity;
      this.perform(this.core.tick(this.clock.now()));
    }, Math.max(0, deadline - this.clock.now()));
  }

  // -- what the client sends --------------------------------------------------------------------

  private writable(): boolean {
    const socket = this.socket;
    return this.core.live && socket !== null && socket.readyState === OPEN && socket.bufferedAmount <= CLIENT_SEND_BUFFER_MAX_BYTES;
  }

  private writeFrame(data: Uint8Array): boolean {
    const socket = this.socket;
    if (socket === null || socket.readyState !== OPEN || socket.bufferedAmount > CLIENT_SEND_BUFFER_MAX_BYTES) {
      this.audioDropped++;
      return false;
    }
    socket.send(data);
    return true;
  }

  private sendNow(type: string, fields: object): ClientMessage {
    const out = this.core.send(type, fields as { readonly [name: string]: unknown });
    this.perform(out);
    const sent = out.find((item) => item.kind === "send");
    if (sent === undefined || sent.kind !== "send") throw this.failure();
    return sent.message;
  }

  /** Write what is queued, in order, while the bound allows; poll every frame_ms meanwhile. */
  private flush(): void {
    this.flushing = true;
    try {
      while (this.queue.length > 0 && this.writable()) {
        const next = this.queue.shift() as Pending;
        try {
          next.resolve(this.sendNow(next.type, next.fields));
        } catch (exc) {
          next.reject(exc instanceof Error ? exc : new Error(String(exc)));
        }
      }
    } finally {
      this.flushing = false;
    }
    this.armFlush();
  }

  private armFlush(): void {
    if (this.queue.length === 0 || this.flushTimer !== null || !this.core.live) return;
    this.flushTimer = this.clock.setTimeout(() => {
      this.flushTimer = null;
      this.flush();
    }, FRAME_MS);
  }

  private failure(): SessionFailed {
    const outcome = this.core.outcome;
    if (outcome === null) return new SessionFailed(null, "the session has not started");
    if (outcome.end !== null) return new SessionFailed(outcome.code, `the session ended: ${outcome.detail}`);
    return new SessionFailed(outcome.code, outcome.detail);
  }
}

/** Call an application's handler; what it throws is rethrown on its own, not into the client. */
function guarded<T>(handler: (value: T) => void, value: T): void {
  try {
    handler(value);
  } catch (exc) {
    queueMicrotask(() => {
      throw exc;
    });
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
