"""The S3 stimulus storage against a real S3 server (SeaweedFS, see ``s3_fixture``): uploads (types,
caching headers, skipping unchanged files, multipart), presigned and public URLs, errors, the
``perceptlab storage`` commands and an app whose State hands out S3 URLs (SQLite and PostgreSQL)."""
from __future__ import annotations

import os
import shutil
import time
import uuid
from pathlib import Path

import pytest
import requests
from click.testing import CliRunner

from server.storage import (
    CACHE_CONTROL,
    MD5_METADATA,
    LocalStorage,
    S3Storage,
    StorageError,
    content_type,
    make_storage,
)
from tests.server.conftest import SMALL_STUDY, WorkerClient, create_test_study
from tests.server.s3_fixture import _free_ports, s3_client, seaweed_s3  # noqa: F401

pytestmark = pytest.mark.timeout(180)


@pytest.fixture
def s3(seaweed_s3, monkeypatch):  # noqa: F811
    """The SeaweedFS endpoint, its credentials in the environment (as in production), a fresh prefix."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", seaweed_s3["access_key"])
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", seaweed_s3["secret_key"])
    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3"):
        monkeypatch.delenv(name, raising=False)
    return {**seaweed_s3, "prefix": f"t{uuid.uuid4().hex[:10]}"}


def _storage(s3, **kwargs) -> S3Storage:
    options = {"prefix": s3["prefix"], "endpoint_url": s3["endpoint_url"], **kwargs}
    return S3Storage(s3["bucket"], **options)


def _objects(s3, prefix: str) -> dict[str, int]:
    client = s3_client(s3["endpoint_url"])
    out = {}
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=s3["bucket"], Prefix=prefix):
        out.update((item["Key"], item["Size"]) for item in page.get("Contents", []))
    return out


@pytest.fixture
def folder(demo_stimuli, tmp_path) -> Path:
    """A private copy of one demo scene (tests change files in it)."""
    scene = next(p for p in sorted((demo_stimuli / "prepared").iterdir()) if p.is_dir())
    target = tmp_path / "stimuli"
    shutil.copytree(scene, target / scene.name)
    shutil.copy(demo_stimuli / "prepared" / "manifest.json", target / "manifest.json")
    return target


def test_upload_sets_types_and_cache_headers_then_skips_unchanged(s3, folder):
    storage = _storage(s3)
    files = sorted(p for p in folder.rglob("*") if p.is_file())
    report = storage.upload_folder(folder, "demo", progress=False)
    assert len(report.uploaded) == len(files) and not report.skipped
    assert report.bytes_uploaded == report.bytes_total == sum(p.stat().st_size for p in files)
    listed = _objects(s3, f"{s3['prefix']}/demo/")
    assert listed == {f"{s3['prefix']}/demo/{p.relative_to(folder).as_posix()}": p.stat().st_size for p in files}
    client = s3_client(s3["endpoint_url"])
    types = set()
    for path in files:
        head = client.head_object(Bucket=s3["bucket"], Key=storage.key("demo", path.relative_to(folder).as_posix()))
        assert head["ContentType"] == content_type(path)
        assert head["CacheControl"] == CACHE_CONTROL
        assert len(head["Metadata"][MD5_METADATA]) == 32
        types.add(head["ContentType"])
    assert "image/png" in types and "application/json" in types

    again = storage.upload_folder(folder, "demo", progress=False)
    assert not again.uploaded and len(again.skipped) == len(files) and again.bytes_uploaded == 0

    # Same size, different bytes: only the MD5 tells, and only that file goes up again.
    changed = next(p for p in files if p.suffix == ".png")
    data = bytearray(changed.read_bytes())
    data[-1] ^= 0xFF
    changed.write_bytes(bytes(data))
    third = storage.upload_folder(folder, "demo", progress=False)
    key = storage.key("demo", changed.relative_to(folder).as_posix())
    assert third.uploaded == [key] and len(third.skipped) == len(files) - 1
    assert requests.get(storage.url("demo", changed.relative_to(folder).as_posix()), timeout=10).content == data


def test_large_file_goes_multipart_and_round_trips(s3, tmp_path):
    folder = tmp_path / "big"
    folder.mkdir()
    payload = os.urandom(12 * 1024 * 1024)
    (folder / "large.bin").write_bytes(payload)
    storage = _storage(s3, multipart_threshold_mb=5)
    report = storage.upload_folder(folder, "big", progress=False)
    assert report.uploaded == [storage.key("big", "large.bin")]
    head = s3_client(s3["endpoint_url"]).head_object(Bucket=s3["bucket"], Key=storage.key("big", "large.bin"))
    assert head["ETag"].strip('"').endswith("-3"), head["ETag"]  # 3 parts of 5 MiB: not an MD5
    assert head["ContentType"] == "application/octet-stream"
    assert storage.upload_folder(folder, "big", progress=False).skipped == [storage.key("big", "large.bin")]
    response = requests.get(storage.url("big", "large.bin"), timeout=30)
    assert response.status_code == 200 and response.content == payload


def test_presigned_urls_fetch_identical_bytes_and_are_cached(s3, folder):
    now = [1000.0]
    storage = _storage(s3, presign_seconds=600, clock=lambda: now[0])
    storage.upload_folder(folder, "demo", progress=False)
    png = next(p for p in sorted(folder.rglob("*.png")))
    relative = png.relative_to(folder).as_posix()
    url = storage.url("demo", relative)
    assert url.startswith(f"{s3['endpoint_url']}/{s3['bucket']}/{s3['prefix']}/demo/") and "X-Amz-Signature=" in url
    assert "X-Amz-Expires=600" in url
    response = requests.get(url, timeout=10)
    assert response.status_code == 200 and response.content == png.read_bytes()
    assert response.headers["Content-Type"] == "image/png"
    assert response.headers["Cache-Control"] == CACHE_CONTROL

    signed = []
    storage.presign = lambda key, expires=None: signed.append(key) or f"signed:{key}:{len(signed)}"
    assert storage.url("demo", relative) == url          # cached: nothing signed
    now[0] += 600 * S3Storage.CACHE_FRACTION + 1         # past a quarter of the lifetime: signed again
    assert storage.url("demo", relative) == f"signed:{storage.key('demo', relative)}:1"
    storage.CACHE_SIZE = 3
    for i in range(10):
        storage.url("demo", f"x{i}.png")
    assert len(storage._urls) == 3                       # bounded


def test_tampered_and_expired_urls_are_refused(s3, folder):
    storage = _storage(s3)
    storage.upload_folder(folder, "demo", progress=False)
    relative = next(p for p in sorted(folder.rglob("*.png"))).relative_to(folder).as_posix()
    url = storage.url("demo", relative)
    assert requests.get(url, timeout=10).status_code == 200
    other = next(p for p in sorted(folder.rglob("*.png"), reverse=True)).relative_to(folder).as_posix()
    assert other != relative
    tampered_key = url.replace(relative, other)           # someone else's signature
    assert requests.get(tampered_key, timeout=10).status_code == 403
    signature = url.rsplit("X-Amz-Signature=", 1)[1][:64]
    flipped = ("0" if signature[0] != "0" else "1") + signature[1:]
    assert requests.get(url.replace(signature, flipped), timeout=10).status_code == 403
    assert requests.get(url.split("?")[0], timeout=10).status_code == 403   # unsigned: the bucket is private
    short = storage.presign(storage.key("demo", relative), expires=1)
    assert requests.get(short, timeout=10).status_code == 200
    time.sleep(2.2)
    assert requests.get(short, timeout=10).status_code == 403


def test_public_base_url_mode():
    storage = S3Storage("bucket", prefix="stim", public_base_url="https://cdn.example.org/base/",
                        client=object())  # never used: public URLs are not signed
    assert storage.url("my-study", "scene 1/ref#1.png") == "https://cdn.example.org/base/stim/my-study/scene%201/ref%231.png"
    assert S3Storage("b", prefix="", public_base_url="https://x.org", client=object()).url("s", "a.png") == \
        "https://x.org/s/a.png"
    assert storage.url_form().startswith("public: https://cdn.example.org/base/stim/<study>/<path>")


def test_make_storage_picks_the_backend(s3):
    from server.config import load_config

    config = load_config({})
    assert config["storage"]["backend"] == "local"
    assert isinstance(make_storage(config), LocalStorage)
    assert isinstance(make_storage({}), LocalStorage)
    config = load_config({"PERCEPTLAB_STORAGE_BACKEND": "s3", "PERCEPTLAB_STORAGE_BUCKET": s3["bucket"],
                          "PERCEPTLAB_STORAGE_ENDPOINT_URL": s3["endpoint_url"],
                          "PERCEPTLAB_STORAGE_PRESIGN_SECONDS": "120"})
    storage = make_storage(config)
    assert isinstance(storage, S3Storage)
    assert (storage.bucket, storage.prefix, storage.endpoint_url, storage.presign_seconds) == \
        (s3["bucket"], "stimuli", s3["endpoint_url"], 120)
    assert storage.multipart_threshold == 8 << 20
    storage.check()
    with pytest.raises(StorageError, match="no S3 bucket configured"):
        make_storage({"storage": {"backend": "s3"}})
    with pytest.raises(StorageError, match="unknown \\[storage\\] backend 'ftp'"):
        make_storage({"storage": {"backend": "ftp"}})


def test_errors_name_the_problem(s3, folder, monkeypatch):
    missing = S3Storage("no-such-bucket-xyz", endpoint_url=s3["endpoint_url"])
    with pytest.raises(StorageError, match="S3 bucket 'no-such-bucket-xyz' does not exist"):
        missing.check()
    with pytest.raises(StorageError, match="'no-such-bucket-xyz' does not exist"):
        missing.upload_folder(folder, "demo", progress=False)
    (port,) = _free_ports(1)
    unreachable = S3Storage(s3["bucket"], endpoint_url=f"http://127.0.0.1:{port}")
    with pytest.raises(StorageError, match=f"cannot reach the S3 endpoint http://127.0.0.1:{port}"):
        unreachable.check()
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "wrong")
    with pytest.raises(StorageError, match="access denied"):
        _storage(s3).check()
    with pytest.raises(StorageError, match="stimulus folder .* does not exist"):
        _storage(s3).upload_folder(folder / "nothing", "demo", progress=False)


def _s3_env(s3, **extra) -> dict[str, str]:
    return {"PERCEPTLAB_STORAGE_BACKEND": "s3", "PERCEPTLAB_STORAGE_BUCKET": s3["bucket"],
            "PERCEPTLAB_STORAGE_ENDPOINT_URL": s3["endpoint_url"], "PERCEPTLAB_STORAGE_PREFIX": s3["prefix"],
            "PERCEPTLAB_CONFIG": "", **extra}


def test_cli_upload_and_check(s3, app, demo_stimuli, tmp_path):
    from server.cli import cli

    slug = create_test_study(app, demo_stimuli, tmp_path, **SMALL_STUDY)
    with app.extensions["perceptlab.sessions"]() as session:
        from sqlalchemy import select

        from server.models import Study

        root = Path(session.scalar(select(Study.stimulus_root).where(Study.slug == slug)))
    files = {p.relative_to(root).as_posix(): p.stat().st_size for p in root.rglob("*") if p.is_file()}
    runner = CliRunner()
    database = ["--database-url", app.config["DATABASE_URL"]]

    result = runner.invoke(cli, ["storage", "upload", slug, *database, "--progress"], env=_s3_env(s3))
    assert result.exit_code == 0, result.output
    assert f"upload {slug}: 100%" in result.output                      # the tqdm bar (on stderr)
    assert f"{slug}: {len(files)} uploaded" in result.output and "0 unchanged" in result.output
    assert _objects(s3, f"{s3['prefix']}/{slug}/") == {f"{s3['prefix']}/{slug}/{k}": v for k, v in files.items()}
    result = runner.invoke(cli, ["storage", "upload", slug, *database], env=_s3_env(s3))
    assert result.exit_code == 0 and f"0 uploaded (0 B), {len(files)} unchanged" in result.output, result.output

    result = runner.invoke(cli, ["storage", "check"], env=_s3_env(s3))
    assert result.exit_code == 0, result.output
    assert f"bucket {s3['bucket']!r} at {s3['endpoint_url']}: ok" in result.output
    assert f"URLs: presigned: {s3['endpoint_url']}/{s3['bucket']}/{s3['prefix']}/<study>/<path>?" in result.output

    result = runner.invoke(cli, ["storage", "upload", "nope", *database], env=_s3_env(s3))
    assert result.exit_code == 2 and "error: no study 'nope'" in result.output
    result = runner.invoke(cli, ["storage", "upload", slug, *database],
                           env=_s3_env(s3, PERCEPTLAB_STORAGE_BACKEND="local"))
    assert result.exit_code == 2 and "error: the storage backend is not s3" in result.output
    assert "PERCEPTLAB_STORAGE_BUCKET" in result.output
    result = runner.invoke(cli, ["storage", "check"], env=_s3_env(s3, PERCEPTLAB_STORAGE_BUCKET="missing-bucket"))
    assert result.exit_code == 2 and "error: S3 bucket 'missing-bucket' does not exist" in result.output


def test_app_with_s3_backend_serves_presigned_urls(s3, database_url, demo_stimuli, tmp_path):
    """The State of a worker's page holds presigned URLs that fetch the study's files."""
    from server import create_app
    from server.config import load_config

    config = load_config(_s3_env(s3))
    app = create_app(config, database_url=database_url, instance_path=str(tmp_path / "instance"),
                     secret_key="test-secret", testing=True)
    try:
        slug = create_test_study(app, demo_stimuli, tmp_path, **SMALL_STUDY)
        storage = app.extensions["perceptlab.storage"]
        assert isinstance(storage, S3Storage)
        root = demo_stimuli / "prepared"
        storage.upload_folder(root, slug, progress=False)
        worker = WorkerClient(app.test_client(), slug, platform="link")
        state = worker.start()
        trial = state["page"]["trials"][0]
        urls = [trial["left"]["full"], trial["right"]["full"], trial["reference"]["full"]]
        for url in urls:
            assert url.startswith(f"{s3['endpoint_url']}/{s3['bucket']}/{s3['prefix']}/{slug}/"), url
            response = requests.get(url, timeout=10)
            assert response.status_code == 200 and response.headers["Content-Type"] == "image/png"
            relative = url.split(f"/{slug}/", 1)[1].split("?")[0]
            from urllib.parse import unquote

            assert response.content == (root / unquote(relative)).read_bytes()
        assert worker.state()["page"]["trials"][0]["left"]["full"] == trial["left"]["full"]  # cached URL
    finally:
        app.extensions["perceptlab.engine"].dispose()
