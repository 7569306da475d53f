// A CommonJS consumer: tsc (module node20) turns these imports into require() calls, which Node
// 20.19 and later answer with the package's ES modules; tests/test_typescript_package.py runs it.
import { ProtocolError, decode } from "voxwire/ovp";
import { brisvox } from "voxwire";

const said = brisvox.decode('{"type":"say","text":"from require"}', "agent");
let refused = "";
try {
  decode("{}", "client");
} catch (error) {
  if (error instanceof ProtocolError) refused = error.code;
}
console.log(JSON.stringify({ module: typeof module, type: said.type, refused }));
