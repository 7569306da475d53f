/**
 * The softphone page of `voxwire demo --browser`, on the npm package's public API only: an
 * `OvpClient` (`voxwire/ovp/client`), the microphone sent with `startCapture` and the agent's
 * audio played with `startPlayback` (`voxwire/audio`). It shows the link's state, the transcript
 * and every event as they come. The server it came from hands it a session (`/session`: the
 * gateway's URL, the session id and a token) and a fresh token for each later connection
 * (`/token`); the page never holds a secret.
 */
import { type Capture, type Playback, startCapture, startPlayback } from "voxwire/audio";
import type { ServerMessage } from "voxwire/ovp";
import { OvpClient, type ServerType } from "voxwire/ovp/client";

/** What `/session` answers: the OVP document's "session-start response". */
interface Grant {
  readonly url: string;
  readonly sessionId: string;
  readonly token: string;
}

/** The events the page lists (the demo agent sends these; a real gateway sends more). */
const LOGGED = [
  "audio.ingress",
  "transcript.partial",
  "transcript.final",
  "agent.thinking",
  "agent.output",
  "audio.egress",
  "agent.barge_in",
  "audio.flush",
  "agent.latency.breakdown",
  "call.quality.update",
  "agent.cost.tick",
  "error",
  "session.end",
] as const satisfies readonly ServerType[];
const MAX_EVENTS = 200;

function element<T extends HTMLElement>(id: string): T {
  const found = document.getElementById(id);
  if (found === null) throw new Error(`the page has no #${id}`);
  return found as T;
}

const callButton = element<HTMLButtonElement>("call");
const hangUpButton = element<HTMLButtonElement>("hangup");
const stateView = element<HTMLOutputElement>("state");
const statsView = element<HTMLDListElement>("stats");
const transcriptView = element<HTMLOListElement>("transcript");
const eventsView = element<HTMLOListElement>("events");

async function getJson<T>(path: string): Promise<T> {
  const response = await fetch(path, { cache: "no-store" });
  if (!response.ok) throw new Error(`${path}: ${response.status} ${await response.text()}`);
  return (await response.json()) as T;
}

/** One transcript line per caller utterance and per agent turn, rewritten as it grows. */
const lines = new Map<string, HTMLLIElement>();
function say(key: string, who: string, text: string, partial: boolean): void {
  let line = lines.get(key);
  if (line === undefined) {
    line = document.createElement("li");
    lines.set(key, line);
    transcriptView.append(line);
  }
  line.textContent = `${who}: ${text}`;
  line.className = partial ? "partial" : "final";
  transcriptView.scrollTop = transcriptView.scrollHeight;
}

function logEvent(event: ServerMessage): void {
  const { type, seq, ts: _ts, session_id: _id, ...fields } = event;
  const line = document.createElement("li");
  line.textContent = `${seq} ${type} ${JSON.stringify(fields).slice(0, 120)}`;
  eventsView.append(line);
  while (eventsView.childElementCount > MAX_EVENTS) eventsView.firstElementChild?.remove();
  eventsView.scrollTop = eventsView.scrollHeight;
}

function showStats(client: OvpClient, capture: Capture | null, playback: Playback): void {
  stateView.textContent = client.state;
  const sent = capture?.stats;
  const played = playback.stats;
  const rows: [string, number][] = [
    ["frames sent", sent?.sent ?? 0],
    ["frames dropped by the client", sent?.dropped ?? 0],
    ["frames dropped waiting to be sent", sent?.overflowed ?? 0],
    ["frames received", played.received],
    ["frames played", played.played],
    ["late, lost, concealed", played.late + played.lost + played.concealed],
    ["flushed (barge-in)", played.flushed],
    ["reconnects", client.reconnects],
  ];
  statsView.replaceChildren(
    ...rows.flatMap(([name, value]) => {
      const term = document.createElement("dt");
      term.textContent = name;
      const data = document.createElement("dd");
      data.textContent = String(value);
      data.dataset["stat"] = name;
      return [term, data];
    }),
  );
}

/** The call in progress: hanging up stops it. */
let hangUp: (() => Promise<void>) | null = null;

async function call(): Promise<void> {
  callButton.disabled = true;
  transcriptView.replaceChildren();
  eventsView.replaceChildren();
  lines.clear();
  const context = new AudioContext(); // made in the click, so the browser lets it play
  const grant = await getJson<Grant>("/session").catch(async (error: unknown) => {
    await context.close();
    throw error;
  });
  let token: string | null = grant.token; // the first connection's; later ones ask for a fresh one
  const client = new OvpClient({
    url: grant.url,
    sessionId: grant.sessionId,
    token: async () => {
      const fresh = token ?? (await getJson<{ token: string }>(`/token?session=${grant.sessionId}`)).token;
      token = null;
      return fresh;
    },
  });
  for (const type of LOGGED) client.on(type, logEvent);
  client.on("transcript.partial", (event) => say(event.utterance_id, event.speaker, event.text, true));
  client.on("transcript.final", (event) => say(event.utterance_id, event.speaker, event.text, false));
  const answers = new Map<string, string>();
  client.on("agent.thinking", (event) => {
    const text = (answers.get(event.turn_id) ?? "") + event.delta;
    answers.set(event.turn_id, text);
    say(event.turn_id, "agent", text, true);
  });
  client.on("agent.output", (event) => say(event.turn_id, "agent", event.text, !event.final));
  client.on("agent.barge_in", (event) => {
    say(event.turn_id, "agent", `${answers.get(event.turn_id) ?? ""} (cut after ${event.played_ms} ms)`, false);
  });

  const playback = startPlayback(client, { context });
  let capture: Capture | null = null;
  const timer = setInterval(() => showStats(client, capture, playback), 100);
  hangUp = async () => {
    hangUp = null;
    hangUpButton.disabled = true;
    client.close();
    await capture?.stop();
    await playback.stop();
    await context.close();
    clearInterval(timer);
    showStats(client, capture, playback);
    callButton.disabled = false;
  };
  void client.ended.then(() => hangUp?.());
  hangUpButton.disabled = false;
  await client.connect();
  await playback.ready;
  capture = await startCapture(client, { context });
}

callButton.addEventListener("click", () => {
  call().catch(async (error: unknown) => {
    console.error("the call failed:", error);
    stateView.textContent = `failed: ${String(error)}`;
    await hangUp?.();
    callButton.disabled = false;
  });
});
hangUpButton.addEventListener("click", () => void hangUp?.());
