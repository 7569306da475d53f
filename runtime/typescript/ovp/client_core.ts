/**
 * The sans-I/O client side of OVP: `ClientCore`, the TypeScript twin of the Python
 * `voxwire.ovp.client_core`. It owns the protocol's rules and nothing else: no socket, no timer,
 * no clock of its own. Every input is a method call that carries `now` (milliseconds on the
 * adapter's clock) and returns what happened, in order: actions for the adapter (`send`,
 * `send_frame`, `close`) and events (`event`, `audio`, `rejected`, `ignored`, `dropped`, `over`).
 *
 * Its state is the spec's client machine (`CLIENT_MACHINE`, generated from `spec/ovp.yaml`):
 * every change of state is `step(CLIENT_MACHINE, state, input)`, and an input the table does not
 * allow throws. What a table cannot say is here: the seq accounting, the duplicates of a replay,
 * the frame counters, and the arithmetic of the two timers (the open timeout before
 * session.start, the idle bound after it: spec decision client-idle-bound).
 */
import { UnknownMessage, decode, encode } from "./codec.js";
import {
  CLIENT_IDLE_TIMEOUT_MS,
  CloseCode,
  FRAME_SEQ_MODULUS,
  MAX_SEQ,
  OPEN_TIMEOUT_MS,
  RESUME_WINDOW_MS,
  RTP_TIMESTAMP_MODULUS,
  SAMPLES_PER_FRAME,
} from "./constants.js";
import { CLOSE_AFTER, ErrorCode, ProtocolError } from "./errors.js";
import { type AudioFrame, decodeFrame, encodeFrame } from "./frames.js";
import { CLIENT_MACHINE, type ClientAction, type ClientInput, type ClientState } from "./machines.js";
import {
  type ClientMessage,
  type ErrorEvent,
  FrameDirection,
  type ServerMessage,
  type SessionEnd,
  type SessionStart,
} from "./messages.js";
import { OVP_SPEC } from "./spec.js";
import { SessionStateError, step } from "../runtime/machine.js";

export type { ClientState } from "./machines.js";

const SENT_BY = (sender: string): ReadonlySet<string> =>
  new Set(OVP_SPEC.messages.filter((m) => m.senders.includes(sender)).map((m) => m.type));
/** What each side may send (from the spec): the untyped path refuses the other side's types. */
export const SERVER_TYPES = SENT_BY("server");
export const CLIENT_TYPES = SENT_BY("client");
const RECEIVING: ReadonlySet<ClientState> = new Set(CLIENT_MACHINE.receiving);
const SENDING: ReadonlySet<ClientState> = new Set(CLIENT_MACHINE.sending);
const HALF_FRAME_SEQ = FRAME_SEQ_MODULUS / 2;
/** How far past a bound its timer fires: the clock's resolution, 1 ms. */
const PAST = 1;

/** How the session ended: its `session.end` if the gateway sent one, else why it is over. */
export interface SessionOutcome {
  readonly end: SessionEnd | null;
  /** An error code when the session failed (`OVP_AUTH_FAILED`, `OVP_RESUME_EXPIRED`, ...). */
  readonly code: string | null;
  readonly detail: string;
}

/** What `ClientCore` returns: actions on its one link, and events, in order. */
export type ClientOutput =
  /** Write this event (stamped and encoded): `message` as the gateway receives it. */
  | { readonly kind: "send"; readonly message: ClientMessage; readonly data: string }
  /** Write this audio frame. */
  | { readonly kind: "send_frame"; readonly data: Uint8Array }
  /** Close the link (the core is done with it). */
  | { readonly kind: "close"; readonly code: number; readonly reason: string }
  /** A server event for the application, each exactly once and in seq order. */
  | { readonly kind: "event"; readonly message: ServerMessage }
  /** A server audio frame for the application. */
  | { readonly kind: "audio"; readonly frame: AudioFrame }
  /** A bad server event or frame, dropped (the client never sends `error`). */
  | { readonly kind: "rejected"; readonly error: ProtocolError }
  /** Dropped as the protocol says (a replayed duplicate, an unknown type); `code` when the
   * gateway broke a rule the client tolerates. */
  | { readonly kind: "ignored"; readonly what: string; readonly code: string | null }
  /** The link is down; a reconnect may resume the session until `resumeBy` (the core's clock). */
  | { readonly kind: "dropped"; readonly resumeBy: number; readonly why: string }
  /** The session is over. */
  | { readonly kind: "over"; readonly outcome: SessionOutcome };

/** The fields of a client event without its envelope, which the core stamps. */
type Fields = { readonly [name: string]: unknown };

/** The client side of one OVP session, across the connections that carry it. */
export class ClientCore {
  /** The session's `session.start`, once received. */
  sessionStart: SessionStart | null = null;
  /** The seq of the last server event processed (replayed duplicates are dropped). */
  lastServerSeq: number | null = null;
  /** How the session ended, once it did. */
  outcome: SessionOutcome | null = null;

  private current: ClientState = CLIENT_MACHINE.initial;
  private nextSeq = 0;
  private frameSeq = 0;
  private rtpTimestamp = 0;
  private lastFrameSeq: number | null = null;
  private fatal: ErrorEvent | null = null;
  /** When the link came up (before session.start) or last showed life (after it). */
  private heardAt = 0;
  private droppedAt = 0;

  constructor(readonly sessionId: string) {}

  /** Where the session is: a state of the spec's client machine. */
  get state(): ClientState {
    return this.current;
  }

  /** Whether events and audio can be written now (started, linked, not over). */
  get live(): boolean {
    return SENDING.has(this.current);
  }

  /** The seq of the next event this client sends. */
  get seq(): number {
    return this.nextSeq;
  }

  /** A connection opened: wait for `session.start`, or resume a started session. */
  connected(now: number): ClientOutput[] {
    const resuming = this.current === "dropped";
    this.go("connect");
    this.heardAt = now;
    if (!resuming) return [];
    const lastServerSeq = this.lastServerSeq ?? 0;
    return [this.stamp("session.resume", { last_server_seq: lastServerSeq })];
  }

  /** Judge one text message from the gateway. */
  receiveText(data: string | Uint8Array, now: number): ClientOutput[] {
    if (!RECEIVING.has(this.current)) return [this.late("a text message", ErrorCode.OVP_EVENT_SCHEMA_INVALID)];
    this.heardAt = now;
    let message: ServerMessage | UnknownMessage;
    let seq: number;
    try {
      message = decode(data, "server");
      seq = this.envelopeSeq(message);
    } catch (exc) {
      if (!(exc instanceof ProtocolError)) throw exc;
      const out: ClientOutput[] = [{ kind: "rejected", error: exc }];
      return this.current === "starting" ? [...out, ...this.fail(exc.code, exc.detail)] : out;
    }
    if (this.current === "starting") return this.beforeStart(message, seq);
    if (message.type === "session.start") {
      // A duplicate of seq 0 would be a replay: it is not (decision resume-of-a-session-not-held).
      return this.fail(
        ErrorCode.OVP_RESUME_EXPIRED,
        `the gateway started the session anew (it no longer holds it): the events after seq ${String(this.lastServerSeq)} are lost`,
        CloseCode.NORMAL,
      );
    }
    if (message.type === "error" && !(message instanceof UnknownMessage) && refusal(message)) {
      // It answers this connection and is never replayed, whatever its seq (decision
      // refusal-outside-the-stream): on a resumed link it may be no greater than the last.
      return [{ kind: "event", message }, ...this.onError(message)];
    }
    if (this.lastServerSeq !== null && seq <= this.lastServerSeq) {
      const what = `seq ${seq} is not greater than ${this.lastServerSeq}, already processed (a replayed duplicate)`;
      return [{ kind: "ignored", what, code: ErrorCode.OVP_SEQ_REGRESSION }];
    }
    this.lastServerSeq = seq;
    if (message instanceof UnknownMessage) {
      return [{ kind: "ignored", what: `server event of unknown type ${JSON.stringify(message.type)}`, code: null }];
    }
    const out: ClientOutput[] = [{ kind: "event", message }];
    if (message.type === "error") return [...out, ...this.onError(message)];
    if (message.type === "session.end") {
      this.go("end");
      const code = typeof message.error_code === "string" ? message.error_code : null;
      out.push({ kind: "close", code: CloseCode.NORMAL, reason: "" }, this.over(message, code, message.reason));
    }
    return out;
  }

  /** Judge one binary message (an audio frame) from the gateway. */
  receiveBinary(data: Uint8Array, now: number): ClientOutput[] {
    if (!SENDING.has(this.current)) {
      if (RECEIVING.has(this.current)) this.heardAt = now;
      return [this.late("an audio frame", ErrorCode.OVP_AUDIO_FRAME_INVALID)];
    }
    this.heardAt = now;
    let frame: AudioFrame;
    try {
      frame = decodeFrame(data, FrameDirection.SERVER_TO_CLIENT);
    } catch (exc) {
      if (!(exc instanceof ProtocolError)) throw exc;
      return [{ kind: "rejected", error: exc }];
    }
    if (this.lastFrameSeq !== null) {
      const ahead = (frame.frame_seq - this.lastFrameSeq + FRAME_SEQ_MODULUS) % FRAME_SEQ_MODULUS;
      if (!(ahead > 0 && ahead < HALF_FRAME_SEQ)) {
        const detail = `frame_seq ${frame.frame_seq} does not advance past ${this.lastFrameSeq}`;
        return [{ kind: "rejected", error: new ProtocolError(ErrorCode.OVP_SEQ_REGRESSION, detail, "frame") }];
      }
    }
    this.lastFrameSeq = frame.frame_seq;
    return [{ kind: "audio", frame }];
  }

  /**
   * Check one client event as it would be sent now, without sending it: throws `TypeError` for a
   * type the client does not send, the encoder's `ProtocolError` for a field the spec refuses.
   */
  check(type: string, fields: Fields): void {
    allowed(type);
    encode(this.stamped(type, Math.min(this.nextSeq, MAX_SEQ), fields));
  }

  /**
   * Stamp and encode one client event: `[send]`, or a close and the end when the seq would pass
   * its bound. Throws `SessionStateError` unless `live`, and what `check` throws.
   */
  send(type: string, fields: Fields): ClientOutput[] {
    allowed(type);
    if (!this.live) throw new SessionStateError(`no live session: the session is ${this.current}`);
    if (this.nextSeq > MAX_SEQ) {
      this.go("seq_exhausted");
      return [
        { kind: "close", code: CloseCode.NORMAL, reason: "seq exhausted" },
        this.over(null, null, `seq would pass ${MAX_SEQ}: the session cannot send more`),
      ];
    }
    return [this.stamp(type, fields)];
  }

  /**
   * One 20 ms frame of caller audio: `[send_frame]`, or `[]` while the link is down (audio is never
   * replayed). frame_seq advances either way, so a gap shows the loss.
   */
  sendAudio(pcm: Uint8Array, flags = 0, rtpTimestamp: number | null = null): ClientOutput[] {
    if (this.sessionStart === null || this.current === "over") {
      throw new SessionStateError("audio flows only between session.start and the end");
    }
    const rtp = rtpTimestamp ?? this.rtpTimestamp;
    const data = encodeFrame({ direction: FrameDirection.CLIENT_TO_SERVER, flags, frame_seq: this.frameSeq, rtp_timestamp: rtp, pcm });
    this.frameSeq = (this.frameSeq + 1) % FRAME_SEQ_MODULUS;
    this.rtpTimestamp = (rtp + SAMPLES_PER_FRAME) % RTP_TIMESTAMP_MODULUS;
    return this.live ? [{ kind: "send_frame", data }] : [];
  }

  /**
   * Go on from `seq`: the seqs before it are never sent (a gap the gateway accepts, decision
   * seq-gaps-allowed). Never back, and at most one past `MAX_SEQ` (the next send then closes);
   * the session cases at the seq bound start there, as with the Python core's `skip_seq`.
   */
  skipSeq(seq: number): void {
    if (!Number.isInteger(seq) || seq < this.nextSeq || seq > MAX_SEQ + 1) {
      throw new RangeError(`the next seq must be in ${this.nextSeq}..${MAX_SEQ + 1}, not ${seq}`);
    }
    this.nextSeq = seq;
  }

  /** The connection is gone: resumable until `now` + the resume window, or over. */
  linkLost(now: number, why = "the link dropped"): ClientOutput[] {
    const state = this.current;
    if (!RECEIVING.has(state)) return [];
    this.go("link_lost");
    if (state === "starting") return [this.over(null, null, `the connection closed before session.start (${why})`)];
    if (state === "failing" && this.fatal !== null) return [this.over(null, this.fatal.code, this.fatal.message)];
    this.droppedAt = now;
    return [{ kind: "dropped", resumeBy: now + RESUME_WINDOW_MS, why }];
  }

  /** The application hangs up (or the first connection failed): the session is over. */
  close(detail = "closed by the client", code: string | null = null): ClientOutput[] {
    if (this.current === "over") return [];
    this.go("hang_up");
    return [{ kind: "close", code: CloseCode.NORMAL, reason: detail }, this.over(null, code, detail)];
  }

  /** No connection could resume the session in time, or the gateway refused for good. */
  giveUp(detail: string, code: string = ErrorCode.OVP_RESUME_EXPIRED): ClientOutput[] {
    if (this.current !== "dropped") return [];
    this.go("give_up");
    return [this.over(null, code, detail)];
  }

  /**
   * When `tick` acts next, or `null`: 1 ms past the open timeout or the idle bound (a message at
   * a bound is in time), or the end of the resume window (no reconnect is tried at it: the Python
   * client's rule).
   */
  nextDeadline(): number | null {
    switch (this.current) {
      case "starting":
        return this.heardAt + OPEN_TIMEOUT_MS + PAST;
      case "live":
      case "failing":
        return this.heardAt + CLIENT_IDLE_TIMEOUT_MS + PAST;
      case "dropped":
        return this.droppedAt + RESUME_WINDOW_MS;
      case "idle":
      case "over":
        return null;
      default:
        return unreachable(this.current);
    }
  }

  /** Fire what is due by `now` (see `nextDeadline`). */
  tick(now: number): ClientOutput[] {
    const deadline = this.nextDeadline();
    if (deadline === null || now < deadline) return [];
    const silent = now - this.heardAt;
    switch (this.current) {
      case "starting":
        return [
          { kind: "close", code: CloseCode.NORMAL, reason: "no session.start in time" },
          ...this.linkLost(now, `no session.start within ${OPEN_TIMEOUT_MS} ms`),
        ];
      case "live":
      case "failing":
        return [
          { kind: "close", code: CloseCode.NORMAL, reason: "link idle: resuming" },
          ...this.linkLost(now, `no message for ${Math.round(silent)} ms, more than ${CLIENT_IDLE_TIMEOUT_MS} (decision client-idle-bound)`),
        ];
      case "dropped":
        return this.giveUp("no connection resumed the session in time");
      case "idle":
      case "over":
        return [];
      default:
        return unreachable(this.current);
    }
  }

  // -- internals ---------------------------------------------------------------------------------

  /** Take the transition `input` from the current state, running its actions. */
  private go(input: ClientInput): void {
    const transition = step(CLIENT_MACHINE, this.current, input);
    for (const action of transition.actions) runAction(action);
    this.current = transition.target;
  }

  private stamp(type: string, fields: Fields): ClientOutput {
    const message = this.stamped(type, this.nextSeq, fields);
    const data = encode(message); // throws ProtocolError for a field the spec refuses
    this.nextSeq++;
    return { kind: "send", message, data };
  }

  /** The event with its envelope first, whatever `fields` holds. */
  private stamped(type: string, seq: number, fields: Fields): ClientMessage {
    const envelope = { type, seq, ts: new Date().toISOString(), session_id: this.sessionId };
    return Object.assign({ ...envelope, ...fields }, envelope) as ClientMessage;
  }

  /** A message after the link's session ended or outside it: dropped. */
  private late(what: string, code: string): ClientOutput {
    const ended = this.outcome?.end != null;
    return ended
      ? { kind: "ignored", what: `${what} after session.end`, code }
      : { kind: "ignored", what: `${what} while ${this.current}`, code: null };
  }

  private envelopeSeq(message: ServerMessage | UnknownMessage): number {
    let seq: unknown;
    let sessionId: unknown;
    if (message instanceof UnknownMessage) {
      seq = message.data["seq"];
      sessionId = message.data["session_id"];
      if (typeof seq !== "number" || !Number.isInteger(seq) || seq < 0 || seq > MAX_SEQ) {
        throw new ProtocolError(ErrorCode.OVP_EVENT_SCHEMA_INVALID, `seq is ${String(seq)}, not an integer in 0..${MAX_SEQ}`, "$.seq", message.type);
      }
    } else {
      seq = message.seq;
      sessionId = message.session_id;
    }
    if (sessionId !== this.sessionId) {
      throw new ProtocolError(ErrorCode.OVP_EVENT_SCHEMA_INVALID, `the event names another session (${JSON.stringify(sessionId)})`, "$.session_id", message.type);
    }
    return seq as number;
  }

  private beforeStart(message: ServerMessage | UnknownMessage, seq: number): ClientOutput[] {
    if (message instanceof UnknownMessage) {
      return this.fail(ErrorCode.OVP_EVENT_SCHEMA_INVALID, `${message.type} before session.start`);
    }
    if (message.type === "session.start") {
      if (seq !== 0) return this.fail(ErrorCode.OVP_EVENT_SCHEMA_INVALID, `session.start has seq ${seq}, not 0`);
      this.go("start");
      this.sessionStart = message;
      this.lastServerSeq = 0;
      return [{ kind: "event", message }];
    }
    if (message.type === "error" && !message.recoverable) {
      // OVP_AUTH_FAILED: the only event of the connection.
      this.lastServerSeq = seq;
      return [{ kind: "event", message }, ...this.onError(message)];
    }
    return this.fail(ErrorCode.OVP_EVENT_SCHEMA_INVALID, `${message.type} before session.start`);
  }

  private onError(error: ErrorEvent): ClientOutput[] {
    if (error.recoverable) return [];
    if (refusal(error) || this.current === "starting") {
      this.go("refused"); // the gateway closes; no session.end
      return [this.over(null, error.code, error.message)];
    }
    if (this.current === "live") {
      this.fatal = error;
      this.go("fatal_error");
    }
    return []; // session.end follows
  }

  /** The session cannot go on with this gateway: close the link, the session is over. */
  private fail(code: string, detail: string, close: number = CloseCode.PROTOCOL_ERROR): ClientOutput[] {
    this.go("broken");
    const reason = close === CloseCode.PROTOCOL_ERROR ? "protocol violation" : "session lost";
    return [{ kind: "close", code: close, reason }, this.over(null, code, detail)];
  }

  private over(end: SessionEnd | null, code: string | null, detail: string): ClientOutput {
    this.outcome = { end, code, detail };
    return { kind: "over", outcome: this.outcome };
  }
}

/** Whether `error` refuses the connection: the gateway closes after it, with no session.end. */
function refusal(error: ErrorEvent): boolean {
  return !error.recoverable && error.code in CLOSE_AFTER;
}

function allowed(type: string): void {
  if (type === "session.resume") throw new TypeError("session.resume is sent by the client itself on a reconnect");
  if (!CLIENT_TYPES.has(type)) throw new TypeError(`a client does not send ${JSON.stringify(type)}`);
}

/** The actions of the client's transitions: the spec's table names none today. */
function runAction(action: ClientAction): never {
  return unreachable(action);
}

/** The exhaustiveness check of every `switch` over a union: a new member fails to compile. */
export function unreachable(value: never): never {
  throw new Error(`unhandled: ${JSON.stringify(value)}`);
}
