/** The error every voxwire decoder and encoder raises for input that breaks its protocol. */
export class VoxwireProtocolError extends Error {
  /** The protocol's own error code (`bad_message`, `OVP_EVENT_SCHEMA_INVALID`, ...). */
  readonly code: string;
  /** What was wrong, in one sentence: the rule and how the value breaks it. */
  readonly detail: string;
  /** Where: a JSON path such as `$.context[3].text` (a frame field's name), or `null`. */
  readonly path: string | null;
  /** The message's wire `type` when it was known, else `null`. */
  readonly messageType: string | null;

  constructor(code: string, detail: string, path: string | null = null, messageType: string | null = null) {
    const where = [messageType, path].filter((part) => part).join(" ");
    super(where ? `${code}: ${where}: ${detail}` : `${code}: ${detail}`);
    this.name = "ProtocolError";
    this.code = code;
    this.detail = detail;
    this.path = path;
    this.messageType = messageType;
  }
}
