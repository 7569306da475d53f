// A fault scenario from Node 20, over the ws package: prints its result as one JSON line.
import WebSocket from "ws";
import type { WebSocketConstructor } from "voxwire/ovp/client";

import { SCENARIOS } from "./faults.js";

const [name, url, sessionId, token] = process.argv.slice(2);
const scenario = SCENARIOS[name ?? ""];
if (scenario === undefined || url === undefined || sessionId === undefined || token === undefined) {
  throw new Error("usage: node node_faults.js SCENARIO URL SESSION_ID TOKEN");
}
const result = await scenario({ url, sessionId, token, WebSocket: WebSocket as unknown as WebSocketConstructor });
process.stdout.write(JSON.stringify(result) + "\n");
