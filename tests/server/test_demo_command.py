"""`perceptlab demo`, the README's main job (`make demo`): stimuli, study, admin login and a live server."""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading

import pytest
import requests

# A guard against a server that never answers, not a speed requirement (a busy machine is slow).
HTTP_TIMEOUT = 120


@pytest.mark.slow  # builds the demo's stimuli and clips in a subprocess
def test_demo_serves_worker_and_dashboard_links(tmp_path):
    """One demo run serves its four studies: paired comparison ("demo", "demo-active"), motion matching
    ("demo-motion") and ratings ("demo-dcr"), and the printed `simulate` line fills each of them."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env.pop("PERCEPTLAB_DATABASE_URL", None)
    command = [sys.executable, "-m", "server.cli", "demo", "--out", str(tmp_path / "demo"), "--port", "0"]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                               start_new_session=True)
    lines: list[str] = []
    try:
        # No deadline of its own: the build takes what the machine needs (a busy one took longer than the
        # 3 minutes allowed before); the suite's per-test timeout ends a hang.
        for line in process.stdout:
            lines.append(line)
            if line.startswith("Ctrl-C"):
                break
        # The server logs every request to this pipe: drain it, or a full pipe buffer blocks the server
        # (the four simulate runs below write more than its 64 KiB).
        threading.Thread(target=lambda: process.stdout.read(), daemon=True).start()
        output = "".join(lines)
        assert "Ctrl-C" in output, output
        base = re.search(r"server on (http://127\.0\.0\.1:\d+)", output).group(1)
        worker = re.search(r"worker link \(plain\):\s+(\S+)", output).group(1)
        password = re.search(r"login: admin / (\S+)", output).group(1)

        consent = requests.get(worker, timeout=HTTP_TIMEOUT)
        assert consent.status_code == 200 and 'id="consent"' in consent.text
        assert "/w/" in consent.url  # redirected to the worker's own tokened page
        session = requests.Session()
        login_page = session.get(f"{base}/admin/login", timeout=HTTP_TIMEOUT)
        token = re.search(r'name="csrf_token" value="([^"]+)"', login_page.text).group(1)
        dashboard = session.post(f"{base}/admin/login", data={"username": "admin", "password": password,
                                                              "csrf_token": token}, timeout=HTTP_TIMEOUT)
        assert dashboard.status_code == 200 and "demo" in dashboard.text and "/admin/login" not in dashboard.url
        assert (tmp_path / "demo" / "stimuli" / "prepared" / "manifest.json").is_file()
        assert oct((tmp_path / "demo" / "admin_password.txt").stat().st_mode & 0o777) == "0o600"
        check_motion_study(base, output, tmp_path)
        check_active_study(output)
        check_rating_study(output, tmp_path)
        check_next_steps(output, tmp_path)
        check_simulate_every_study(output, tmp_path)
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=20)


def check_motion_study(base: str, output: str, tmp_path) -> None:
    """The demo's motion study: its link leads through consent and instructions to the motion app,
    whose state names the calibration stage and a noise texture the server serves."""
    link = re.search(r"motion study \(plain\):\s+(\S+)", output).group(1)
    assert "/s/demo-motion?participant=" in link
    consent = requests.get(link, timeout=HTTP_TIMEOUT)
    assert consent.status_code == 200 and 'id="consent"' in consent.text and "motion" in consent.text
    token = re.search(r"/w/([^/]+)/", consent.url).group(1)
    session = requests.Session()
    assert session.post(consent.url + "consent", data={"agree": "yes"}, timeout=HTTP_TIMEOUT).status_code == 200
    page = session.post(consent.url + "instructions", timeout=HTTP_TIMEOUT)
    assert page.status_code == 200 and 'id="motion-root"' in page.text and "assignment_driver.js" in page.text
    assert "motion-matching" in page.text  # the driver's paradigm (static/js/paradigms.js)
    assignment = re.search(r'&#34;assignmentId&#34;: &#34;(\d+)&#34;|"assignmentId": "(\d+)"', page.text)
    assignment_id = next(g for g in assignment.groups() if g)
    state = requests.get(f"{base}/api/v1/assignments/{assignment_id}/state",
                         headers={"Authorization": f"Bearer {token}"}, timeout=HTTP_TIMEOUT).json()
    assert state["kind"] == "motion" and state["stage"] == "calibration"
    noise = requests.get(base + state["params"]["noise_url"], timeout=HTTP_TIMEOUT)
    assert noise.status_code == 200 and noise.headers["Content-Type"] == "image/png"
    assert (tmp_path / "demo" / "motion_clips" / "manifest.json").is_file()


def check_active_study(output: str) -> None:
    """The demo's active-sampling study ("demo-active") is served: its link leads to the consent page
    (tests/browser/test_active_study.py walks it to the end)."""
    link = re.search(r"active sampling:\s+(\S+)", output).group(1)
    assert "/s/demo-active?participant=" in link
    consent = requests.get(link, timeout=HTTP_TIMEOUT)
    assert consent.status_code == 200 and 'id="consent"' in consent.text


def check_rating_study(output: str, tmp_path) -> None:
    """The rating paradigm's demo study ("demo-dcr", from its Paradigm.demo_studies hook) is served on the same
    prepared scenes: its link leads to the consent page."""
    link = re.search(r"rating study \(DCR\):\s+(\S+)", output).group(1)
    assert "/s/demo-dcr?participant=" in link
    consent = requests.get(link, timeout=HTTP_TIMEOUT)
    assert consent.status_code == 200 and 'id="consent"' in consent.text and "rate" in consent.text
    assert 'method = "dcr"' in (tmp_path / "demo" / "demo_demo-dcr.toml").read_text()


def check_next_steps(output: str, tmp_path) -> None:
    """The printed next steps run as printed from another folder, without the venv on the PATH, and find
    the demo's instance (its database and secret key): the results line exports the demo study."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    environment = {k: v for k, v in os.environ.items() if not k.startswith(("PERCEPTLAB_", "VIRTUAL_ENV"))}
    environment["PATH"] = "/usr/bin:/bin"
    for label, expected in (("any other command", r"^demo\s+active"), ("export and analyse", r"^2/3 export -> ")):
        line = re.search(rf"^  {label}:\s+(.+?)(?:   \(or:.*)?$", output, re.M).group(1)
        run = subprocess.run(line, shell=True, cwd=elsewhere, env=environment, capture_output=True, text=True,
                             timeout=120)
        assert run.returncode == 0 and re.search(expected, run.stdout, re.M), (line, run.stdout, run.stderr)
    assert (tmp_path / "demo" / "results" / "votes.csv").is_file()
    assert not any(elsewhere.iterdir())


DEMO_STUDIES = ("demo", "demo-active", "demo-motion", "demo-dcr")


def check_simulate_every_study(output: str, tmp_path) -> None:
    """The printed `simulate` line, pointed at each of the demo's four studies in turn (one paradigm's
    simulated worker each: paired comparison twice, motion matching, ratings), finishes every worker: exit 0,
    none gave up (issue 36: simulate works on every paradigm and on the demo's four studies)."""
    line = re.search(r"^  fill it with workers:\s+(.+)$", output, re.M).group(1)
    assert " simulate demo " in line and "--workers 20" in line, line
    for slug in DEMO_STUDIES:
        command = line.replace(" simulate demo ", f" simulate {slug} ").replace("--workers 20", "--workers 2 --quiet")
        run = subprocess.run(command, shell=True, cwd=tmp_path, capture_output=True, text=True, timeout=600)
        print(f"simulate {slug}:\n{run.stdout}{run.stderr}")  # shown in full when the test fails
        assert run.returncode == 0, slug
        assert re.search(r"\b2 completed\b|completed 2\b", run.stdout), (slug, run.stdout)
