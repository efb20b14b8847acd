"""`perceptlab demo`, the README's main job: stimuli, study, admin login and a live server."""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time

import requests


def test_demo_serves_worker_and_dashboard_links(tmp_path):
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env.pop("PERCEPTLAB_DATABASE_URL", None)
    command = [sys.executable, "-m", "server.cli", "demo", "--out", str(tmp_path / "demo"), "--port", "0"]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                               start_new_session=True)
    lines: list[str] = []
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            line = process.stdout.readline()
            if not line:
                break
            lines.append(line)
            if line.startswith("Ctrl-C"):
                break
        output = "".join(lines)
        assert "Ctrl-C" in output, output
        base = re.search(r"server on (http://127\.0\.0\.1:\d+)", output).group(1)
        worker = re.search(r"worker link \(plain\):\s+(\S+)", output).group(1)
        password = re.search(r"login: admin / (\S+)", output).group(1)

        consent = requests.get(worker, timeout=10)
        assert consent.status_code == 200 and 'id="consent"' in consent.text
        assert "/w/" in consent.url  # redirected to the worker's own tokened page
        session = requests.Session()
        login_page = session.get(f"{base}/admin/login", timeout=10)
        token = re.search(r'name="csrf_token" value="([^"]+)"', login_page.text).group(1)
        dashboard = session.post(f"{base}/admin/login", data={"username": "admin", "password": password,
                                                              "csrf_token": token}, timeout=10)
        assert dashboard.status_code == 200 and "demo" in dashboard.text and "/admin/login" not in dashboard.url
        assert (tmp_path / "demo" / "stimuli" / "prepared" / "manifest.json").is_file()
        assert oct((tmp_path / "demo" / "admin_password.txt").stat().st_mode & 0o777) == "0o600"
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=20)
