"""`perceptlab demo` also builds the motion demo clips and serves the "demo-motion" study."""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time

import requests


def test_demo_serves_the_motion_study(tmp_path):
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env.pop("PERCEPTLAB_DATABASE_URL", None)
    command = [sys.executable, "-m", "server.cli", "demo", "--out", str(tmp_path / "demo"), "--port", "0"]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                               start_new_session=True)
    lines: list[str] = []
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            line = process.stdout.readline()
            if not line:
                break
            lines.append(line)
            if line.startswith("Ctrl-C"):
                break
        output = "".join(lines)
        assert "Ctrl-C" in output, output
        link = re.search(r"motion study \(plain\):\s+(\S+)", output).group(1)
        assert "/s/demo-motion?participant=" in link
        consent = requests.get(link, timeout=10)
        assert consent.status_code == 200 and 'id="consent"' in consent.text and "motion" in consent.text
        token = re.search(r"/w/([^/]+)/", consent.url).group(1)
        session = requests.Session()
        assert session.post(consent.url + "consent", data={"agree": "yes"}, timeout=10).status_code == 200
        page = session.post(consent.url + "instructions", timeout=10)
        assert page.status_code == 200 and 'id="motion-root"' in page.text and "motion_app.js" in page.text
        assignment = re.search(r'&#34;assignmentId&#34;: &#34;(\d+)&#34;|"assignmentId": "(\d+)"', page.text)
        assignment_id = next(g for g in assignment.groups() if g)
        base = re.search(r"server on (http://127\.0\.0\.1:\d+)", output).group(1)
        state = requests.get(f"{base}/api/v1/assignments/{assignment_id}/state",
                             headers={"Authorization": f"Bearer {token}"}, timeout=10).json()
        assert state["kind"] == "motion" and state["stage"] == "calibration"
        noise = requests.get(base + state["params"]["noise_url"], timeout=10)
        assert noise.status_code == 200 and noise.headers["Content-Type"] == "image/png"
        assert (tmp_path / "demo" / "motion_clips" / "manifest.json").is_file()
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=20)
