// The scenario from Node 20, over the ws package: prints its result as one JSON line.
import WebSocket from "ws";
import type { WebSocketConstructor } from "voxwire/ovp/client";

import { runScenario } from "./scenario.js";

const [url, sessionId, token] = process.argv.slice(2);
if (url === undefined || sessionId === undefined || token === undefined) {
  throw new Error("usage: node node_client.js URL SESSION_ID TOKEN");
}
const result = await runScenario({ url, sessionId, token, WebSocket: WebSocket as unknown as WebSocketConstructor });
process.stdout.write(JSON.stringify(result) + "\n");
