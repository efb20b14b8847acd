"""Every command of the README's quick starts runs as printed: each ```` ```sh quickstart ```` block, from an
empty folder, in one bash script (``set -euo pipefail``) with the venv's ``perceptlab`` first on ``PATH``.

What the test changes, and why: port 5000 becomes a free port (other tests and helpers share the machine);
after a line that starts a server in the background (``... &``) the script waits until the port answers, as
a reader waits for ``serve`` in a second terminal before the next line. Nothing else is added: the video
block makes its own clips (``stimuli build-demo-video``), as a reader without clips of their own would.
The blocks use two or three simulated workers and two scenes: about 15 CPU seconds per block, most of it the
server's start and the results' plots.
"""
from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FENCE = re.compile(r"^```sh quickstart\n(.*?)^```$", re.M | re.S)
BACKGROUND = re.compile(r"&\s*(#.*)?$")
README_PORT = "5000"


def quickstart_blocks(text: str) -> list[str]:
    """The bodies of the ```` ```sh quickstart ```` blocks of a Markdown text, in order."""
    return FENCE.findall(text)


def runnable(block: str, port: int) -> str:
    """``block`` as the script the test runs: strict bash, the free port, a wait after each background line
    and every background job ended on exit."""
    lines = ["set -euo pipefail", "trap 'kill $(jobs -p) 2>/dev/null || true' EXIT"]
    wait = (f"for _ in $(seq 600); do (exec 3<>/dev/tcp/127.0.0.1/{port}) 2>/dev/null && break; sleep 0.1; done; "
            f"(exec 3<>/dev/tcp/127.0.0.1/{port})")
    for line in block.replace(f":{README_PORT}", f":{port}").replace(f"--port {README_PORT}", f"--port {port}") \
            .splitlines():
        lines.append(line)
        if BACKGROUND.search(line) and not line.rstrip().endswith("\\"):
            lines.append(wait)
    return "\n".join(lines) + "\n"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _titles(text: str) -> list[str]:
    """The ``###`` heading above each quick-start block (the study kind it starts)."""
    return [re.findall(r"^### (.+)$", text[:m.start()], re.M)[-1] for m in FENCE.finditer(text)]


README_TEXT = (ROOT / "README.md").read_text(encoding="utf-8")
KINDS = _titles(README_TEXT)


def test_the_readme_has_a_quick_start_per_study_kind():
    assert KINDS == ["Images by paired comparison", "Ratings (ACR, DCR, CCR)", "Video", "Motion matching"]
    # The README keeps what it is and the two set-up commands.
    assert "make demo" in README_TEXT and "make test" in README_TEXT


def test_the_runner_waits_for_a_background_server_and_uses_the_free_port():
    script = runnable("perceptlab serve --port 5000 &\nperceptlab simulate s --url http://127.0.0.1:5000\n", 6123)
    assert "5000" not in script and "--port 6123 &\nfor _ in" in script and "127.0.0.1:6123" in script


@pytest.mark.slow  # four short studies: build, launch, serve, simulate, results
@pytest.mark.parametrize("kind", KINDS)
def test_quickstart_block_runs(kind, tmp_path):
    block = quickstart_blocks(README_TEXT)[KINDS.index(kind)]
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
           "PYTHONUNBUFFERED": "1"}
    for name in [n for n in env if n.startswith("PERCEPTLAB_")]:  # the reader's shell has none of the suite's
        del env[name]
    process = subprocess.Popen(["bash", "-c", runnable(block, _free_port())], cwd=tmp_path, env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        output, _ = process.communicate(timeout=500)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)
            process.wait(timeout=20)
    assert process.returncode == 0, output[-4000:]
    results = next(tmp_path.glob("results-*"))
    assert (results / "analysis" / "summary.json").is_file(), output[-2000:]
    # The simulated workers' answers reached the export (not an empty study analysed).
    assert "gave up 0" in output and re.search(r"completed [1-9]", output), output[-2000:]
