"""The ``voxwire`` command: a demo call on both protocols, capture validation, schema export.

```text
voxwire demo [--protocol brisvox|ovp] [--record DIR]
voxwire validate FILE --protocol brisvox|ovp
voxwire schema --protocol ovp [--message transcript.final]
voxwire version
```
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from importlib import import_module
from typing import Any

from voxwire import __version__
from voxwire.schema import json_schema

__all__ = ["main"]

PROTOCOLS = ("brisvox", "ovp")


class CommandError(Exception):
    """A failure the command reports in one line (bad arguments, unreadable files)."""


def _protocol_module(name: str) -> Any:
    return import_module(f"voxwire.{name}")


def _cmd_schema(args: argparse.Namespace) -> int:
    try:
        document = json_schema(args.protocol, args.message)
    except KeyError as exc:
        raise CommandError(exc.args[0]) from None
    print(json.dumps(document, indent=2, ensure_ascii=False))
    return 0


def _cmd_version(args: argparse.Namespace) -> int:
    print(f"voxwire {__version__}")
    for name in PROTOCOLS:
        module = _protocol_module(name)
        title = module.__doc__.split(":", 1)[0]
        print(f"{name}: {title} (spec sha256 {module.SPEC_SHA256[:12]})")
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="voxwire",
        description="Typed messages and transports for the Brisvox agent protocol v1 and the "
        "Orbit Voice Protocol 1.0.",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    schema = commands.add_parser("schema", help="print the JSON Schema of a protocol or message")
    schema.add_argument("--protocol", required=True, choices=PROTOCOLS)
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
    except BrokenPipeError:  # voxwire schema | head
        return 0
