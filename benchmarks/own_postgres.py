"""A PostgreSQL cluster of one's own: ``initdb`` in a temporary folder, its own port, started and stopped with
``pg_ctl``. For outages (tests/server/test_outages.py, benchmarks/outage.py): the machine's shared server (5432)
is never stopped or restarted.

PostgreSQL refuses to run as root; as root (CI, this machine) the cluster runs as the ``postgres`` user
(``runuser``), its folder made theirs. Without PostgreSQL's binaries :class:`OwnPostgres` raises
:class:`NoPostgres` (the test skips with its reason, unless ``PERCEPTLAB_REQUIRE_POSTGRES=1``).
"""
from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path



class NoPostgres(RuntimeError):
    """PostgreSQL's ``pg_ctl`` and ``initdb`` are not installed."""


def _bin_dir() -> Path | None:
    """Where ``pg_ctl`` and ``initdb`` are: on the PATH, else Debian's versioned folder (newest)."""
    found = shutil.which("pg_ctl")
    if found and shutil.which("initdb"):
        return Path(found).resolve().parent  # /usr/local/bin may hold links to a few of them only
    folders = sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=lambda p: int(Path(p).parent.name)
                     if Path(p).parent.name.isdigit() else 0)
    return Path(folders[-1]) if folders else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class OwnPostgres:
    """One cluster in a temporary folder of its own (outside pytest's, which only root may enter) on a free
    loopback port; :meth:`stop` and :meth:`start` are the outage, :meth:`close` removes it all."""

    def __init__(self):
        bin_dir = _bin_dir()
        if bin_dir is None:
            raise NoPostgres("PostgreSQL's pg_ctl/initdb are not installed")
        self.bin = bin_dir
        folder = self.folder = Path(tempfile.mkdtemp(prefix="perceptlab-own-pg-"))
        self.data = folder / "data"
        self.port = _free_port()
        self.prefix: list[str] = []
        if os.geteuid() == 0:  # postgres will not run as root
            user = pwd.getpwnam("postgres")
            os.chown(folder, user.pw_uid, user.pw_gid)
            self.prefix = ["runuser", "-u", "postgres", "--"]
        try:
            self._run("initdb", "-D", str(self.data), "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync")
            self.start()
            import psycopg

            with psycopg.connect(f"host=127.0.0.1 port={self.port} user=postgres dbname=postgres",
                                 autocommit=True) as connection:
                connection.execute("CREATE DATABASE perceptlab")
        except BaseException:
            self.close()  # no server or folder left behind by a set-up that failed half-way
            raise

    @property
    def url(self) -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/perceptlab"

    @property
    def dsn(self) -> str:
        return f"host=127.0.0.1 port={self.port} user=postgres dbname=perceptlab"

    def _run(self, tool: str, *args: str) -> None:
        done = subprocess.run([*self.prefix, str(self.bin / tool), *args], capture_output=True, text=True, timeout=60)
        if done.returncode != 0:
            raise RuntimeError(f"{tool} failed ({done.returncode}): {done.stderr.strip() or done.stdout.strip()}")

    def start(self) -> None:
        # Loopback only, its own socket folder, no fsync (a test's data need not survive a power cut).
        options = (f"-p {self.port} -c listen_addresses=127.0.0.1 -c unix_socket_directories={self.folder} "
                   f"-c fsync=off -c synchronous_commit=off -c full_page_writes=off")
        self._run("pg_ctl", "-D", str(self.data), "-o", options, "-l", str(self.folder / "log"), "-w", "-t", "30",
                  "start")

    def stop(self) -> None:
        """``pg_ctl stop -m fast``: every connection is cut, as in a restart."""
        self._run("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "-t", "30", "stop")

    def close(self) -> None:
        try:
            self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "-t", "30", "stop")
        except RuntimeError:
            pass  # stopped already
        shutil.rmtree(self.folder, ignore_errors=True)

