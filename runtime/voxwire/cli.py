"""The ``voxwire`` command: a demo call on both protocols, capture validation and reports,
schema export.

```text
voxwire demo [--protocol brisvox|ovp|both] [--record DIR] [--no-color]
voxwire demo --browser [--port PORT] [--record DIR]
voxwire validate FILE|- [--protocol brisvox|ovp]
voxwire report CAPTURE [-o call.html] [--protocol brisvox|ovp]
voxwire schema --protocol ovp [--message transcript.final]
voxwire version                 (or voxwire --version)
```

Errors are one line on stderr with exit status 2; Ctrl-C ends any command with status 130.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import shutil
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from importlib import import_module
from pathlib import Path
from typing import Any

from voxwire import __version__
from voxwire.capture import CaptureError
from voxwire.demo import DemoFailed, run
from voxwire.demo.timeline import Style
from voxwire.errors import VoxwireError
from voxwire.report import read_call
from voxwire.report.page import render_page
from voxwire.schema import json_schema
from voxwire.validate import Note, Tally, check_capture

__all__ = ["BUG_REPORT", "main"]

PROTOCOLS = ("brisvox", "ovp")
PROGRESS_AFTER = 2.0
"""Seconds a validation runs before it shows its progress on stderr."""
PIPE_SIZE = (120, 24)
"""The demo's columns and lines where its output is no terminal and ``COLUMNS`` is not set."""
STDIN = "-"
"""The FILE that names standard input."""
INTERRUPTED = 130
"""The exit status after Ctrl-C (128 + SIGINT), as shells report it."""
MAX_PORT = 65535
BUG_REPORT = "a bug in voxwire: please report it, with the file"
"""The hint after a failure of voxwire's own (never the input's fault)."""


class CommandError(VoxwireError):
    """A failure the command reports in one line (bad arguments, unreadable files)."""


def _port(text: str) -> int:
    """A TCP port for ``--port``: 0 (a free one) to 65535."""
    try:
        port = int(text)
    except ValueError:
        port = -1
    if not 0 <= port <= MAX_PORT:
        raise argparse.ArgumentTypeError(f"not a port (0 to {MAX_PORT}): {text!r}")
    return port


def _protocol_module(name: str) -> Any:
    return import_module(f"voxwire.{name}")


def _cmd_schema(args: argparse.Namespace) -> int:
    try:
        document = json_schema(args.protocol, args.message)
    except KeyError as exc:
        raise CommandError(exc.args[0]) from None
    print(json.dumps(document, indent=2, ensure_ascii=False))
    return 0


def _cmd_demo(args: argparse.Namespace) -> int:
    if args.browser:
        return _browser_demo(args)
    if args.port is not None:
        raise CommandError("--port serves the softphone: add --browser")
    protocols = PROTOCOLS if args.protocol == "both" else (args.protocol,)
    color = sys.stdout.isatty() and not args.no_color and not os.environ.get("NO_COLOR")
    try:
        "→←…─".encode(sys.stdout.encoding or "ascii")
    except (UnicodeEncodeError, LookupError):
        unicode = False
    else:
        unicode = True
    try:
        if args.record is not None:
            args.record.mkdir(parents=True, exist_ok=True)
        style = Style(color, unicode, width=shutil.get_terminal_size(PIPE_SIZE).columns)
        run(protocols, out=sys.stdout, style=style, record=args.record)
    except OSError as exc:
        where = f"{exc.filename}: " if exc.filename else ""
        raise CommandError(f"{where}{exc.strerror or exc}") from None
    except DemoFailed as exc:
        raise CommandError(str(exc)) from None
    return 0


def _browser_demo(args: argparse.Namespace) -> int:
    if args.protocol == "brisvox":
        raise CommandError("the browser softphone speaks OVP: leave out --protocol brisvox")
    try:
        from voxwire.demo import softphone
    except ModuleNotFoundError as exc:
        if exc.name != "jwt":
            raise
        raise CommandError(
            "the softphone runs a gateway, which needs PyJWT: pip install 'voxwire[gateway]'"
        ) from None
    record = None
    if args.record is not None:
        record = args.record / "softphone-{session_id}.jsonl"
    try:
        if args.record is not None:
            args.record.mkdir(parents=True, exist_ok=True)
        softphone.serve(host="127.0.0.1", port=args.port or 0, out=sys.stdout, record=record)
    except OSError as exc:
        where = f"{exc.filename}: " if exc.filename else ""
        raise CommandError(f"{where}{exc.strerror or exc}") from None
    return 0


def _cmd_validate(args: argparse.Namespace) -> int:
    name = "<stdin>" if args.file == STDIN else _printable(args.file)
    try:
        stdin = args.file == STDIN
        raw = open(sys.stdin.fileno() if stdin else args.file, "rb", closefd=not stdin)  # noqa: SIM115
    except OSError as exc:
        raise CommandError(f"{name}: {exc.strerror or exc}") from None
    tally = Tally()
    with (
        _Progress(raw, name) as progress,
        io.BufferedReader(progress) as lines,
        _one_line(name, lambda: f" at line {tally.line}"),
    ):
        _, findings = check_capture(lines, tally, protocol=args.protocol)
        for finding in findings:
            code = "note" if isinstance(finding, Note) else finding.code
            print(f"{name}:{finding.line}: {code}: {_printable(finding.text)}")
    print(
        f"{name}: {_count(tally.messages, 'message')}, {_count(tally.frames, 'frame')}, "
        f"{_count(tally.violations, 'violation')}"
    )
    return 0 if tally.violations == 0 else 1


def _cmd_report(args: argparse.Namespace) -> int:
    capture: Path = args.capture
    output: Path = args.output if args.output is not None else capture.with_suffix(".html")
    name = _printable(str(capture))
    if output.resolve() == capture.resolve():
        raise CommandError(f"{name}: the report would overwrite the capture; name another -o")
    with _one_line(name):
        call = read_call(capture, protocol=args.protocol)
        page = render_page(call)
    try:
        output.write_text(page, encoding="utf-8")
    except OSError as exc:
        raise CommandError(f"{_printable(str(output))}: {exc.strerror or exc}") from None
    print(
        f"{_printable(str(output))}: the report of {name} ({_count(call.messages, 'message')}, "
        f"{_count(call.frames, 'frame')}, {_count(call.violations, 'violation')})"
    )
    return 0


@contextlib.contextmanager
def _one_line(name: str, at: Callable[[], str] = str) -> Iterator[None]:
    """Every failure of reading the capture ``name`` as one line: where the capture is broken,
    what the system refused, or voxwire's own failure (``at()`` says where in the capture) with
    the bug-report hint; never a traceback."""
    try:
        yield
    except CaptureError as exc:
        raise CommandError(f"{name}:{exc.line}: {_printable(exc.problem)}") from None
    except (BrokenPipeError, KeyboardInterrupt):
        raise
    except OSError as exc:
        raise CommandError(f"{name}: {exc.strerror or exc}") from None
    except Exception as exc:  # voxwire's own failure: said in one line, with where
        where = f"{type(exc).__name__} at {_raised_at(exc)}: {_printable(str(exc))[:200]}"
        raise CommandError(f"{name}: voxwire failed{at()} ({where}); {BUG_REPORT}") from None


def _printable(text: str) -> str:
    """``text`` on one line and writable as UTF-8: line breaks, control characters and lone
    surrogates (from a file name or a message) escaped."""
    escaped = text.encode("utf-8", "backslashreplace").decode("utf-8")
    return "".join(ch if ch.isprintable() or ch == " " else ascii(ch)[1:-1] for ch in escaped)


def _raised_at(exc: BaseException) -> str:
    """The file and line an exception was raised at."""
    where = exc.__traceback__
    while where is not None and where.tb_next is not None:
        where = where.tb_next
    if where is None:
        return "an unknown place"
    return f"{Path(where.tb_frame.f_code.co_filename).name}:{where.tb_lineno}"


def _count(number: int, noun: str) -> str:
    return f"{number:,} {noun}{'' if number == 1 else 's'}"


def _a(word: str) -> str:
    """``word`` behind its indefinite article: "a brisvox", "an ovp"."""
    return f"{'an' if word[:1].lower() in 'aeiou' else 'a'} {word}"


class _Progress(io.RawIOBase):
    """A file's bytes as read; once reading takes over ``PROGRESS_AFTER`` s, how far on stderr."""

    def __init__(self, raw: io.BufferedReader, name: str) -> None:
        super().__init__()
        self._raw = raw
        self._name = name
        self._size = os.fstat(raw.fileno()).st_size
        self._read = 0
        self._next = time.monotonic() + PROGRESS_AFTER
        self._shown = False

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        count = self._raw.readinto(buffer)
        self._read += count
        if time.monotonic() >= self._next:
            self._show()
        return count

    def _show(self) -> None:
        share = f" ({self._read / self._size:.0%})" if self._size else ""
        status = f"voxwire validate: {self._name}: {self._read / 1e6:,.1f} MB read{share}"
        if sys.stderr.isatty():
            print(f"\r{status}", end="", file=sys.stderr, flush=True)
            self._next = time.monotonic() + 0.2
        else:
            print(status, file=sys.stderr, flush=True)
            self._next = time.monotonic() + 5.0
        self._shown = True

    def close(self) -> None:
        if self._shown and sys.stderr.isatty():
            print(file=sys.stderr)
        self._shown = False
        self._raw.close()
        super().close()


def _cmd_version(args: argparse.Namespace) -> int:
    print(f"voxwire {__version__}")
    for name in PROTOCOLS:
        module = _protocol_module(name)
        title = f"{module.PROTOCOL_TITLE} {module.PROTOCOL_VERSION}"
        print(f"{name}: {title} (spec sha256 {module.SPEC_SHA256[:12]})")
    return 0


class _VersionAction(argparse.Action):
    """``--version``: what ``voxwire version`` prints, then exit."""

    def __init__(self, option_strings: Sequence[str], dest: str, help: str) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, help=help)

    def __call__(self, parser: argparse.ArgumentParser, *_: object) -> None:
        _cmd_version(argparse.Namespace())
        parser.exit()


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="voxwire",
        description="Typed messages and transports for the Brisvox agent protocol v1 and the "
        "Orbit Voice Protocol 1.0.",
    )
    parser.add_argument(
        "--version", action=_VersionAction, help="print the package, spec and protocol versions"
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    demo = commands.add_parser(
        "demo",
        help="play one scripted call per protocol on loopback and print its timeline",
        description="Play one scripted call per protocol with the real runtimes, on loopback "
        "(no external service), and print every message and a summary.",
    )
    demo.add_argument(
        "--protocol",
        choices=(*PROTOCOLS, "both"),
        default="both",
        help="the call to play (default: both, one after the other)",
    )
    demo.add_argument(
        "--record",
        metavar="DIR",
        type=Path,
        help="also write each call's capture: DIR/brisvox.jsonl, DIR/ovp.jsonl",
    )
    demo.add_argument("--no-color", action="store_true", help="no colours (also: NO_COLOR=1)")
    demo.add_argument(
        "--browser",
        action="store_true",
        help="serve a softphone page and an OVP gateway with a demo agent on loopback, until "
        "Ctrl-C: open the address it prints, press Call and speak (--record DIR writes each "
        "session's capture)",
    )
    demo.add_argument(
        "--port",
        type=_port,
        metavar="PORT",
        help="the softphone's port (default: a free one, printed)",
    )
    demo.set_defaults(run=_cmd_demo)
    validate = commands.add_parser(
        "validate",
        help="check a capture against the spec and the session rules",
        description="Check a recorded session (a capture, see docs/capture.md) and print every "
        "violation as FILE:LINE: CODE: explanation. Exit status 0 for a clean capture, 1 for "
        "violations, 2 for a file that is no capture (or a failure of voxwire's own).",
    )
    validate.add_argument(
        "file", metavar="FILE", help=f"the capture (.jsonl); {STDIN} reads standard input"
    )
    validate.add_argument(
        "--protocol",
        choices=PROTOCOLS,
        help="judge the capture by this protocol's rules (default: the one its header names)",
    )
    validate.set_defaults(run=_cmd_validate)
    report = commands.add_parser(
        "report",
        help="write a call's report: one self-contained HTML page of a capture",
        description="Write one HTML page of a recorded session (a capture): a timeline of both "
        "directions, the latency and jitter plots, the statistics (docs/observability.md) and "
        "every verdict of voxwire validate. The page needs no network. Exit status 0 once it is "
        "written (whatever the verdicts), 2 for a file that is no capture (or a failure of "
        "voxwire's own).",
    )
    report.add_argument("capture", metavar="CAPTURE", type=Path, help="the capture (.jsonl)")
    report.add_argument(
        "-o",
        "--output",
        metavar="FILE",
        type=Path,
        help="where to write the page (default: CAPTURE with the suffix .html)",
    )
    report.add_argument(
        "--protocol",
        choices=PROTOCOLS,
        help="read the capture by this protocol's rules (default: the one its header names)",
    )
    report.set_defaults(run=_cmd_report)
    schema = commands.add_parser("schema", help="print the JSON Schema of a protocol or message")
    schema.add_argument(
        "--protocol", required=True, choices=PROTOCOLS, help="whose schema to print"
    )
    schema.add_argument("--message", metavar="TYPE", help="one message type, e.g. transcript.final")
    schema.set_defaults(run=_cmd_schema)
    version = commands.add_parser("version", help="print the package, spec and protocol versions")
    version.set_defaults(run=_cmd_version)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command; return its exit status. Errors are one line on stderr, not a traceback."""
    args = _parser().parse_args(argv)
    run: Callable[[argparse.Namespace], int] = args.run
    try:
        return run(args)
    except CommandError as exc:
        print(f"voxwire {args.command}: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # voxwire schema | head: the rest of the output has nowhere to go
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except KeyboardInterrupt:  # Ctrl-C: the user asked to stop; no traceback
        print(file=sys.stderr)
        return INTERRUPTED
