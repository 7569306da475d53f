"""What an import of the npm package costs a browser bundle, measured, and the table of
docs/typescript.md held to the measure.

Each row is one entry file of a consumer project that imports what its row names from the packed
package; esbuild (pinned in tests/node.py) bundles it for the browser, minified, ES module, and the
bundle is gzipped at level 9. The documented sizes may differ from the measured by 5 % or 0.2 kB,
whichever is more: past that the test fails and prints the table as measured, to paste.
"""

from __future__ import annotations

import gzip
import re

from tests.conftest import ROOT
from tests.node import consumer, run, tool

ENTRIES = {
    "`OvpClient` (`voxwire/ovp/client`)": 'export { OvpClient } from "voxwire/ovp/client";',
    "everything of `voxwire/audio`": 'export * from "voxwire/audio";',
    "`startCapture`, `startPlayback`": (
        'export { startCapture, startPlayback } from "voxwire/audio";'
    ),
    "`Resampler`, `Framer` (Node bots)": 'export { Framer, Resampler } from "voxwire/audio";',
}
"""The rows: what is imported, and the entry file that imports it."""
HEADING = "### Bundle cost"
RELATIVE, ABSOLUTE_KB = 0.05, 0.2


def measure() -> dict[str, tuple[float, float]]:
    """Each row's minified and gzipped size in kB (1000 bytes)."""
    project = consumer()
    sizes = {}
    for index, (row, source) in enumerate(ENTRIES.items()):
        entry = project.root / f"bundle_{index}.js"
        entry.write_text(source + "\n")
        out = project.root / f"bundle_{index}.min.js"
        command = [tool("esbuild"), entry.name, "--bundle", "--minify", "--format=esm"]
        run([*command, "--platform=browser", f"--outfile={out.name}"], project.root)
        data = out.read_bytes()
        sizes[row] = (len(data) / 1000, len(gzip.compress(data, 9, mtime=0)) / 1000)
    return sizes


def table(sizes: dict[str, tuple[float, float]]) -> str:
    lines = ["| import | minified | minified and gzipped |", "|---|---|---|"]
    lines += [f"| {row} | {m:.1f} kB | {g:.1f} kB |" for row, (m, g) in sizes.items()]
    return "\n".join(lines)


def documented() -> dict[str, tuple[float, float]]:
    page = (ROOT / "docs" / "typescript.md").read_text(encoding="utf-8")
    section = page[page.index(HEADING) :]
    rows = re.findall(r"^\| (.+?) \| ([\d.]+) kB \| ([\d.]+) kB \|$", section, re.M)
    return {row: (float(m), float(g)) for row, m, g in rows}


def test_the_documented_bundle_sizes_are_the_measured_ones() -> None:
    sizes = measure()
    client_gzipped = sizes["`OvpClient` (`voxwire/ovp/client`)"][1]
    pure = sizes["`Resampler`, `Framer` (Node bots)"]
    everything = sizes["everything of `voxwire/audio`"]
    assert pure[0] < everything[0], "the pure parts are tree-shaken apart from the browser's"
    assert 0 < everything[1] < client_gzipped, "the audio helpers cost less than the client"
    docs = documented()
    stale = [
        row
        for row, measured in sizes.items()
        if row not in docs
        or any(
            abs(d - m) > max(RELATIVE * m, ABSOLUTE_KB)
            for d, m in zip(docs[row], measured, strict=True)
        )
    ]
    assert not stale, f"docs/typescript.md, {HEADING}, is stale; as measured:\n{table(sizes)}"
