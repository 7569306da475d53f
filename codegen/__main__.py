"""``python -m codegen generate | check | validate | breaking | npm-package | softphone``: the
spec to the package and its docs, what a spec change breaks, the npm package's folder, and the
softphone page's bundle."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from codegen.breaking import report
from codegen.loader import SpecError
from codegen.pipeline import check, generate, load_protocols
from codegen.render import RenderError
from codegen.softphone import BUNDLE, BuildError
from codegen.softphone import check as check_bundle
from codegen.softphone import write as write_bundle
from codegen.typescript.package import AssemblyError, assemble

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m codegen",
        description="Generate voxwire's messages, checks, frame codec, JSON Schema and reference "
        "docs from spec/*.yaml.",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    commands.add_parser("generate", help="write every generated file (and remove orphans)")
    commands.add_parser(
        "check", help="exit 1 and show a diff when generated files differ from the spec"
    )
    commands.add_parser("validate", help="check the spec files only; list every problem")
    breaking = commands.add_parser(
        "breaking",
        help="exit 1 when the specs break peers or users of an older version (docs/evolution.md)",
    )
    breaking.add_argument(
        "--against",
        required=True,
        metavar="REF",
        help="the older specs: a git ref (v0.1.0, main~3), a spec file or a folder of them",
    )
    breaking.add_argument("--format", choices=("text", "json"), default="text")
    npm = commands.add_parser(
        "npm-package",
        help="assemble the npm package (generated/typescript and runtime/typescript) into a "
        "folder for `npm pack`",
    )
    npm.add_argument("target", nargs="?", default="build/typescript", type=Path, metavar="DIR")
    softphone = commands.add_parser(
        "softphone",
        help="rebuild the script of `voxwire demo --browser`'s page from the npm package "
        "(needs Node 20.19 and npm)",
    )
    softphone.add_argument(
        "--check", action="store_true", help="exit 1 and show a diff when the committed one differs"
    )
    args = parser.parse_args(argv)
    if args.command == "softphone":
        return _softphone(check=args.check)
    try:
        if args.command == "npm-package":
            print(f"assembled the npm package in {assemble(args.target.resolve())}")
            return 0
        if args.command == "breaking":
            found = report(args.against)
            if args.format == "json":
                print(json.dumps(found.to_json(), indent=2))
            else:
                for line in found.lines():
                    print(line)
            return 1 if found.failing else 0
        if args.command == "validate":
            protocols = load_protocols()
            for p in protocols:
                counts = ", ".join(f"{len(s.messages)} from {s.id}" for s in p.senders)
                print(f"{p.spec_file}: ok ({len(p.messages)} message types: {counts})")
            return 0
        if args.command == "generate":
            changed = generate()
            for path in changed:
                print(f"wrote {path}")
            print(f"{len(changed)} file(s) changed")
            return 0
        drifts = check()
    except SpecError as exc:
        for problem in exc.problems:
            print(problem, file=sys.stderr)
        print(f"{len(exc.problems)} problem(s) in the spec", file=sys.stderr)
        return 2
    except RenderError as exc:
        print(f"codegen bug: {exc}", file=sys.stderr)
        return 3
    except AssemblyError as exc:
        print(f"npm-package: {exc}", file=sys.stderr)
        return 2
    for drift in drifts:
        print(f"{drift.kind}: {drift.path}")
        if drift.diff:
            print(drift.diff)
    if drifts:
        print(
            f"{len(drifts)} generated file(s) differ from the spec: run `python -m codegen "
            "generate` and commit the result",
            file=sys.stderr,
        )
        return 1
    print("generated files match the spec")
    return 0


def _softphone(*, check: bool) -> int:
    try:
        if check:
            diff = check_bundle()
            if diff:
                print(diff)
                print(
                    f"{BUNDLE} differs from its sources: run `python -m codegen softphone` and "
                    "commit the result",
                    file=sys.stderr,
                )
                return 1
            print(f"{BUNDLE} matches its sources")
        else:
            changed = write_bundle()
            print(f"wrote {BUNDLE}" if changed else f"{BUNDLE} is up to date")
    except BuildError as exc:
        print(f"softphone: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
