"""Slow clients against gunicorn alone and behind the nginx recipe (``deploy/nginx/perceptlab.conf``).

A slow client sends a vote's headers and the first bytes of its body, then holds the connection,
trickling a byte now and then so that no timeout ends it. Served directly, gunicorn gives each
such request a thread that waits for the rest of the body: a few dozen of them hold every thread,
and an honest worker's vote waits until they go. Behind nginx (request buffering on), nginx holds
them and gunicorn never sees a request before its body is whole.

The script runs one study on PostgreSQL (the production setting: gthread workers, the fast lane),
one gunicorn on loopback and nginx in front of it over TLS (a self-signed certificate made for the
run), and prints an honest worker's vote latency without and with the slow clients, directly
against gunicorn and through nginx::

    .venv/bin/python benchmarks/slow_clients.py              # 32 slow clients, 30 votes per measurement
    .venv/bin/python benchmarks/slow_clients.py --slow 64 --votes 50

``tests/server/test_nginx_deploy.py`` uses the same harness (:class:`Nginx`, :class:`SlowClients`,
:class:`HonestWorker`) on a smaller scale.
"""
from __future__ import annotations

import argparse
import os
import shutil
import socket
import ssl
import statistics
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
from benchmarks.scale_out import (POSTGRES_ADMIN_URL, Instance, create_database, drop_database,  # noqa: E402
                                  run_cli)
from tests.server.s3_fixture import free_ports  # noqa: E402

NGINX = Path("/usr/sbin/nginx")
SITE = ROOT / "deploy" / "nginx" / "perceptlab.conf"
# A study whose trials a worker answers without looking (no quiz, no gold): only latency matters here.
STUDY = """[study]
slug = "{slug}"
name = "Slow clients"
manifests = ["{manifest}"]
[pages]
pairs_per_page = 10
min_pages = 1
max_pages = 30
[quality]
quiz_size = 0
gold_rate = 0.0
[texts]
researcher = "the slow-clients benchmark"
contact = "bench@perceptlab.invalid"
"""


# ----------------------------------------------------------------------------- nginx

def self_signed_certificate(folder: Path) -> tuple[Path, Path]:
    """A certificate for localhost and 127.0.0.1, valid for two days, and its key (openssl)."""
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                    "-days", "2", "-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1",
                    "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True)
    return cert, key


ACCEL_LOCATION = "/_protected_stimuli/"  # the recipe's internal location for stimulus files


def site_for_loopback(upstream_port: int, http_port: int, https_port: int, cert: Path, key: Path,
                      stimulus_root: Path | None = None, extra: str = "") -> str:
    """``deploy/nginx/perceptlab.conf`` as it is, but for loopback ports, the given certificate and, when
    given, ``stimulus_root`` as the folder its internal stimulus location aliases; ``extra`` is added to
    the HTTPS server (a benchmark's own locations).

    Each replaced line must be there exactly once: a recipe that changed shape fails here rather than
    being tested in a form nobody deploys."""
    text = SITE.read_text()
    alias = f"alias {stimulus_root.resolve().as_posix().rstrip('/')}/;" if stimulus_root else "alias /nonexistent/;"
    for old, new in (("server 127.0.0.1:8000;", f"server 127.0.0.1:{upstream_port};"),
                     ("listen 80;", f"listen 127.0.0.1:{http_port};"),
                     ("listen [::]:80;", "# (no IPv6 listener on loopback)"),
                     ("listen 443 ssl http2;", f"listen 127.0.0.1:{https_port} ssl http2;"),
                     ("listen [::]:443 ssl http2;", "# (no IPv6 listener on loopback)"),
                     ("/etc/letsencrypt/live/study.example.org/fullchain.pem", str(cert)),
                     ("/etc/letsencrypt/live/study.example.org/privkey.pem", str(key)),
                     ("alias /srv/perceptlab/stimuli/;", alias),
                     ("    location / {\n", extra + "    location / {\n")):
        if text.count(old) != 1:
            raise ValueError(f"{SITE}: expected {old!r} exactly once")
        text = text.replace(old, new)
    return text


class Nginx:
    """Debian's nginx with the recipe's site, in a folder of its own (pid, logs, temporary files)."""

    def __init__(self, folder: Path, site: str, https_port: int):
        self.folder, self.site, self.https_port = folder, site, https_port
        self.process: subprocess.Popen | None = None

    def start(self, timeout: float = 20.0) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        (self.folder / "site.conf").write_text(self.site)
        temp = "\n".join(f"  {kind}_temp_path {self.folder / kind};" for kind in ("client_body", "proxy", "fastcgi",
                                                                                    "uwsgi", "scgi"))
        user = "user root root;\n" if os.geteuid() == 0 else ""  # workers must reach this private folder
        (self.folder / "nginx.conf").write_text(
            f"{user}daemon off;\nworker_processes 1;\npid {self.folder / 'nginx.pid'};\n"
            f"error_log {self.folder / 'error.log'} warn;\nevents {{ worker_connections 512; }}\n"
            f"http {{\n  access_log off;\n{temp}\n  include {self.folder / 'site.conf'};\n}}\n")
        check = subprocess.run([str(NGINX), "-t", "-p", str(self.folder), "-e", str(self.folder / "error.log"),
                                "-c", str(self.folder / "nginx.conf")], capture_output=True, text=True)
        if check.returncode != 0:
            raise RuntimeError(f"nginx -t refused the recipe: {check.stderr}")
        self.process = subprocess.Popen([str(NGINX), "-p", str(self.folder), "-e", str(self.folder / "error.log"),
                                         "-c", str(self.folder / "nginx.conf")], stdin=subprocess.DEVNULL,
                                        stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"nginx exited: {(self.folder / 'error.log').read_text(errors='replace')[-2000:]}")
            try:
                socket.create_connection(("127.0.0.1", self.https_port), timeout=1).close()
                return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("nginx did not listen in time")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()  # SIGTERM: fast shutdown of the master and its worker
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, 9)
                self.process.wait()


# ----------------------------------------------------------------------------- clients

class HonestWorker:
    """One worker over HTTP(S) with keep-alive (``requests``): enters, consents, and votes on its trials
    one after another; :meth:`vote` returns the seconds its POST took."""

    def __init__(self, base_url: str, slug: str, verify: str | bool = True):
        import requests

        self.base, self.http = base_url, requests.Session()
        # Not the environment's proxies or CA bundle (which would win over ``verify``): loopback, this certificate.
        self.http.trust_env = False
        self.http.verify = verify
        entry = self.http.post(f"{base_url}/api/v1/studies/{slug}/assignments",
                               json={"platform": "link", "worker_id": f"H{uuid.uuid4().hex[:10]}"}, timeout=30)
        entry.raise_for_status()
        self.assignment, self.token = entry.json()["assignment_id"], entry.json()["token"]
        self.http.headers["Authorization"] = f"Bearer {self.token}"
        self.action("consent")
        self.state = self.action("instructions_done")

    def url(self, path: str) -> str:
        return f"{self.base}/api/v1/assignments/{self.assignment}/{path}"

    def action(self, action: str) -> dict:
        answer = self.http.post(self.url("actions"), json={"action": action}, timeout=30)
        answer.raise_for_status()
        return answer.json()

    def vote(self, timeout: float = 60.0) -> float:
        if self.state["stage"] == "page_done":
            self.state = self.action("continue")
        trial = next(t for t in self.state["page"]["trials"] if not t["answered"])
        body = {"vote_id": str(uuid.uuid4()), "trial_id": trial["trial_id"], "choice": "left", "rt_ms": 800.0,
                "input": "mouse", "client_time": "2026-11-28T10:00:00.000Z"}
        started = time.perf_counter()
        answer = self.http.post(self.url("votes"), json=body, timeout=timeout)
        elapsed = time.perf_counter() - started
        if answer.status_code != 201:
            raise RuntimeError(f"vote answered {answer.status_code}: {answer.text[:300]}")
        trial["answered"] = True
        if answer.json().get("state"):
            self.state = answer.json()["state"]
        return elapsed

    def votes(self, n: int) -> list[float]:
        return [self.vote() for _ in range(n)]


class SlowClients:
    """``n`` connections that each send a vote's headers (a valid token) and the start of a 4 kB body,
    then hold, trickling one byte every ``trickle_s`` seconds so that no read timeout ends them."""

    BODY_BYTES = 4096

    def __init__(self, port: int, path: str, token: str, n: int, tls: bool, trickle_s: float = 2.0):
        self.port, self.path, self.token, self.n, self.tls, self.trickle_s = port, path, token, n, tls, trickle_s
        self.sockets: list[socket.socket] = []
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> SlowClients:
        context = ssl.create_default_context()
        context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
        head = (f"POST {self.path} HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer {self.token}\r\n"
                f"Content-Type: application/json\r\nContent-Length: {self.BODY_BYTES}\r\n\r\n").encode()
        for _ in range(self.n):
            sock = socket.create_connection(("127.0.0.1", self.port), timeout=10)
            if self.tls:
                sock = context.wrap_socket(sock, server_hostname="localhost")
            sock.sendall(head + b'{"vote_id": "')
            self.sockets.append(sock)
        self._thread = threading.Thread(target=self._trickle, daemon=True)
        self._thread.start()
        return self

    def _trickle(self) -> None:
        while not self._stop.wait(self.trickle_s):
            with self._lock:
                for sock in list(self.sockets):
                    try:
                        sock.sendall(b"0")
                    except OSError:
                        self.sockets.remove(sock)  # closed by the server: no longer held

    def held(self) -> int:
        """How many connections the server still holds open without an answer."""
        count = 0
        with self._lock:
            for sock in self.sockets:
                try:
                    sock.setblocking(False)
                    try:
                        sock.recv(1)  # an answer, or b"" for a closed connection: not held
                    except (BlockingIOError, ssl.SSLWantReadError):
                        count += 1  # nothing from the server: it still waits for the body
                    finally:
                        sock.setblocking(True)
                except OSError:
                    pass
        return count

    def __exit__(self, *exc_info) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        for sock in self.sockets:
            try:
                sock.close()
            except OSError:
                pass


# ----------------------------------------------------------------------------- the stack

class Stack:
    """A study on its own PostgreSQL database, one gunicorn on loopback, nginx in front over TLS."""

    def __init__(self, work: Path, manifest: Path, *, database_url: str | None = None, workers: int = 1,
                 threads: int = 4, accel_root: Path | None = None, study: str = STUDY, extra_site: str = ""):
        self.work, self.manifest, self.slug = work, manifest, "slow"
        # accel_root: [storage] accel_redirect on, and the folder the recipe's internal location aliases
        self.accel_root, self.study, self.extra_site = accel_root, study, extra_site
        self.env: dict[str, str] = {}
        self.own_database = database_url is None
        self.db_name = f"perceptlab_slow_{os.getpid()}_{uuid.uuid4().hex[:6]}"
        self.database_url = database_url
        self.gunicorn_port, self.http_port, self.https_port = free_ports(3)
        self.workers, self.threads = workers, threads
        self.gunicorn: Instance | None = None
        self.nginx: Nginx | None = None

    @property
    def direct_url(self) -> str:
        return f"http://127.0.0.1:{self.gunicorn_port}"

    @property
    def nginx_url(self) -> str:
        return f"https://127.0.0.1:{self.https_port}"

    def __enter__(self) -> Stack:
        self.work.mkdir(parents=True, exist_ok=True)
        try:
            if self.own_database:
                self.database_url = create_database(POSTGRES_ADMIN_URL, self.db_name)
            base = {k: v for k, v in os.environ.items() if not k.startswith("PERCEPTLAB_")}
            env = {**base, "PERCEPTLAB_DATABASE_URL": self.database_url,
                   "PERCEPTLAB_SERVER_INSTANCE_PATH": str(self.work / "instance"),
                   "PERCEPTLAB_SECRET_KEY": "slow-" + uuid.uuid4().hex, "PERCEPTLAB_SERVER_PROXY_FIX": "1",
                   "PERCEPTLAB_SERVER_ENTRY_LIMIT": "0", "PERCEPTLAB_SERVER_ADMISSION_RATE": "0",
                   "PERCEPTLAB_SERVER_LIVE_SCALES_INTERVAL": "0", "PYTHONPATH": str(ROOT)}
            if self.accel_root is not None:
                env.update(PERCEPTLAB_STORAGE_ACCEL_REDIRECT=ACCEL_LOCATION,
                           PERCEPTLAB_STORAGE_ACCEL_ROOT=str(self.accel_root))
            self.env = env
            self.add_study(self.study.format(slug=self.slug, manifest=self.manifest.as_posix()), self.slug)
            self.gunicorn = Instance("slow", self.gunicorn_port, env, self.workers, self.threads,
                                     self.work / "gunicorn.log")
            self.gunicorn.launch()
            cert, key = self_signed_certificate(self.work)
            self.cert = cert
            site = site_for_loopback(self.gunicorn_port, self.http_port, self.https_port, cert, key,
                                     self.accel_root, self.extra_site)
            self.nginx = Nginx(self.work / "nginx", site, self.https_port)
            self.nginx.start()
            self.gunicorn.wait_ready()
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc_info) -> None:
        if self.nginx is not None:
            self.nginx.stop()
        if self.gunicorn is not None:
            self.gunicorn.stop()
        if self.own_database and self.database_url is not None:
            drop_database(POSTGRES_ADMIN_URL, self.db_name)

    def add_study(self, text: str, slug: str) -> None:
        """``perceptlab study create`` of a study file's ``text`` in this stack's instance."""
        path = self.work / f"{slug}.toml"
        path.write_text(text)
        run_cli(["study", "create", str(path)], self.env)

    def worker(self, through_nginx: bool) -> HonestWorker:
        if through_nginx:
            return HonestWorker(self.nginx_url, self.slug, verify=str(self.cert))
        return HonestWorker(self.direct_url, self.slug)

    def slow_clients(self, n: int, through_nginx: bool, token_of: HonestWorker) -> SlowClients:
        port = self.https_port if through_nginx else self.gunicorn_port
        return SlowClients(port, f"/api/v1/assignments/{token_of.assignment}/votes", token_of.token, n,
                           tls=through_nginx)


def median_ms(seconds: list[float]) -> float:
    return 1000.0 * statistics.median(seconds)


def main() -> None:
    from benchmarks._common import build_demo_stimuli, print_table

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--slow", type=int, default=32, help="slow clients held during the second measurement")
    parser.add_argument("--votes", type=int, default=30, help="honest votes per measurement")
    parser.add_argument("--workers", type=int, default=4, help="gunicorn worker processes")
    parser.add_argument("--threads", type=int, default=2, help="threads per gunicorn worker")
    parser.add_argument("--stall-timeout", type=float, default=5.0,
                        help="seconds an honest vote may wait directly on gunicorn with slow clients held")
    args = parser.parse_args()
    if not NGINX.exists():
        sys.exit(f"{NGINX} is missing: make nginx (apt-get install nginx)")
    work = Path(os.environ.get("TMPDIR", "/tmp")) / f"perceptlab-slow-{os.getpid()}"
    rows = []
    try:
        manifest = build_demo_stimuli(work / "stimuli", scenes=4)
        with Stack(work, manifest, workers=args.workers, threads=args.threads) as stack:
            for through_nginx in (False, True):
                where = "through nginx (TLS)" if through_nginx else "gunicorn directly"
                honest, attacker = stack.worker(through_nginx), stack.worker(through_nginx)
                honest.votes(3)  # warm: connections, the study known to the process
                without = honest.votes(args.votes)
                with stack.slow_clients(args.slow, through_nginx, attacker) as slow:
                    time.sleep(0.5)  # let the server take them up
                    try:
                        with_slow = [honest.vote(timeout=args.stall_timeout) for _ in range(args.votes)]
                        figure = f"{median_ms(with_slow):.1f}"
                    except Exception as exc:  # noqa: BLE001 - a timeout is the finding
                        figure = f"no answer in {args.stall_timeout:g} s ({type(exc).__name__})"
                    held = slow.held()
                rows.append([where, f"{median_ms(without):.1f}", figure, f"{held}/{args.slow}"])
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"# {args.votes} honest votes per median; gunicorn gthread {args.workers}x{args.threads} on PostgreSQL; "
          f"{args.slow} slow clients (headers + part of a body, held, trickling)")
    print_table(["served", "median vote ms without", f"with {args.slow} slow clients", "slow clients held"], rows)


if __name__ == "__main__":
    main()
