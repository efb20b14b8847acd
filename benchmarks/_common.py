"""Shared helpers of the benchmark scripts (not part of the package)."""
from __future__ import annotations

import resource
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VENV_BIN = Path(sys.executable).parent


@contextmanager
def timer():
    """Yields a dict whose 'seconds' is filled when the block ends."""
    out = {}
    start = time.perf_counter()
    try:
        yield out
    finally:
        out["seconds"] = time.perf_counter() - start


def peak_rss_mb() -> float:
    """Peak resident memory of this process so far, in MB (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def print_table(header: list[str], rows: list[list]) -> None:
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows)]
    line = lambda r: "  ".join(str(x).rjust(w) for x, w in zip(r, widths))  # noqa: E731
    print(line(header))
    print("  ".join("-" * w for w in widths))
    for r in rows:
        print(line(r))


def build_demo_stimuli(folder: Path, scenes: int, *, quiet: bool = True) -> Path:
    """The demo stimuli with every method (``perceptlab stimuli build-demo``), built once into ``folder``
    and reused by later runs; returns the manifest."""
    manifest = folder / "prepared" / "manifest.json"
    if not manifest.is_file():
        subprocess.run([str(VENV_BIN / "perceptlab"), "stimuli", "build-demo", str(folder), "--scenes", str(scenes),
                        "--methods", "all", "--overwrite"], check=True, cwd=ROOT,
                       stdout=subprocess.DEVNULL if quiet else None)
    return manifest
