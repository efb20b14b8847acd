"""The S3 stimulus storage against a real S3 server (SeaweedFS, see ``s3_fixture``): uploads (types,
caching headers, skipping unchanged files, multipart), presigned and public URLs, errors, the
``perceptlab storage`` commands and an app whose State hands out S3 URLs (SQLite and PostgreSQL)."""
from __future__ import annotations

import datetime
import json
import os
import re
import shutil
import uuid
from pathlib import Path

import botocore.auth
import botocore.compat
import pytest
import requests
from click.testing import CliRunner

from server.services import app_services
from server.storage import (
    CACHE_CONTROL,
    MD5_METADATA,
    LocalStorage,
    S3Storage,
    StorageError,
    content_type,
    make_storage,
)
from server.stimulus_index import SALT_KEY, name_maker, opaque_name
from tests.server.conftest import SMALL_STUDY, WorkerClient, create_test_study
from tests.server.s3_fixture import free_ports, s3_client, seaweed_s3  # noqa: F401

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


def _shown(folder: Path) -> dict[str, str]:
    """Opaque name -> path of the files a study over ``folder`` would show (its amplified images and
    the reference): not the manifests, nor the original (unamplified) images."""
    key = bytes(range(32))
    paths = [p.relative_to(folder).as_posix() for p in sorted(folder.rglob("*.png")) if "original" not in p.parts]
    return {opaque_name(key, path): path for path in paths}


def test_upload_sends_only_the_named_files_with_types_and_cache_headers_then_skips_unchanged(s3, folder):
    storage = _storage(s3)
    shown = _shown(folder)
    assert 10 < len(shown) < sum(1 for p in folder.rglob("*") if p.is_file())
    report = storage.upload_files(folder, "demo", shown, progress=False)
    assert len(report.uploaded) == len(shown) and not report.skipped and not report.stale
    assert report.bytes_uploaded == report.bytes_total == sum((folder / p).stat().st_size for p in shown.values())
    listed = _objects(s3, f"{s3['prefix']}/demo/")
    assert listed == {f"{s3['prefix']}/demo/{name}": (folder / path).stat().st_size for name, path in shown.items()}
    assert all(re.fullmatch(rf"{s3['prefix']}/demo/[0-9a-f]{{32}}\.png", key) for key in listed)
    client = s3_client(s3["endpoint_url"])
    for name, path in shown.items():
        head = client.head_object(Bucket=s3["bucket"], Key=storage.key("demo", name))
        assert head["ContentType"] == "image/png" == content_type(path)
        assert head["CacheControl"] == CACHE_CONTROL
        assert len(head["Metadata"][MD5_METADATA]) == 32

    again = storage.upload_files(folder, "demo", shown, progress=False)
    assert not again.uploaded and len(again.skipped) == len(shown) and again.bytes_uploaded == 0

    # Same size, different bytes: only the MD5 tells, and only that file goes up again.
    name, relative = next(iter(shown.items()))
    changed = folder / relative
    data = bytearray(changed.read_bytes())
    data[-1] ^= 0xFF
    changed.write_bytes(bytes(data))
    third = storage.upload_files(folder, "demo", shown, progress=False)
    assert third.uploaded == [storage.key("demo", name)] and len(third.skipped) == len(shown) - 1
    assert requests.get(storage.url("demo", name), timeout=10).content == data


def test_stale_objects_are_listed_and_pruned(s3, folder):
    """Objects an older upload left under the study's prefix (path-style keys) are reported; --prune deletes them."""
    storage = _storage(s3)
    shown = _shown(folder)
    old_key = storage.key("demo", "scene/gold/degraded.png")
    s3_client(s3["endpoint_url"]).put_object(Bucket=s3["bucket"], Key=old_key, Body=b"old")
    report = storage.upload_files(folder, "demo", shown, progress=False)
    assert report.stale == [old_key] and not report.deleted and old_key in _objects(s3, f"{s3['prefix']}/demo/")
    report = storage.upload_files(folder, "demo", shown, progress=False, prune=True)
    assert report.deleted == [old_key] and len(report.skipped) == len(shown)
    assert set(_objects(s3, f"{s3['prefix']}/demo/")) == {storage.key("demo", name) for name in shown}


def test_large_file_goes_multipart_and_round_trips(s3, tmp_path):
    folder = tmp_path / "big"
    folder.mkdir()
    payload = os.urandom(12 * 1024 * 1024)
    (folder / "large.bin").write_bytes(payload)
    storage = _storage(s3, multipart_threshold_mb=5)
    files = {"0123abcd.bin": "large.bin"}
    report = storage.upload_files(folder, "big", files, progress=False)
    assert report.uploaded == [storage.key("big", "0123abcd.bin")]
    head = s3_client(s3["endpoint_url"]).head_object(Bucket=s3["bucket"], Key=storage.key("big", "0123abcd.bin"))
    assert head["ETag"].strip('"').endswith("-3"), head["ETag"]  # 3 parts of 5 MiB: not an MD5
    assert head["ContentType"] == "application/octet-stream"
    assert storage.upload_files(folder, "big", files, progress=False).skipped == [storage.key("big", "0123abcd.bin")]
    response = requests.get(storage.url("big", "0123abcd.bin"), timeout=30)
    assert response.status_code == 200 and response.content == payload


def test_presigned_urls_fetch_identical_bytes_and_are_cached(s3, folder):
    now = [1000.0]
    storage = _storage(s3, presign_seconds=600, clock=lambda: now[0])
    shown = _shown(folder)
    storage.upload_files(folder, "demo", shown, progress=False)
    name, relative = next(iter(shown.items()))
    url = storage.url("demo", name)
    assert url.startswith(f"{s3['endpoint_url']}/{s3['bucket']}/{s3['prefix']}/demo/{name}?")
    assert "X-Amz-Signature=" in url and "X-Amz-Expires=600" in url
    response = requests.get(url, timeout=10)
    assert response.status_code == 200 and response.content == (folder / relative).read_bytes()
    assert response.headers["Content-Type"] == "image/png"
    assert response.headers["Cache-Control"] == CACHE_CONTROL

    signed = []
    storage.presign = lambda key, expires=None: signed.append(key) or f"signed:{key}:{len(signed)}"
    assert storage.url("demo", name) == url              # cached: nothing signed
    now[0] += 600 * S3Storage.CACHE_FRACTION + 1         # past a quarter of the lifetime: signed again
    assert storage.url("demo", name) == f"signed:{storage.key('demo', name)}:1"
    storage.CACHE_SIZE = 3
    for i in range(10):
        storage.url("demo", f"x{i}.png")
    assert len(storage._urls) == 3                       # bounded


# Every header a presigned GET of a stimulus may carry (SeaweedFS's own included): none of them
# names the file or its path, and the only time is the upload's (S3 always sends Last-Modified).
S3_STIMULUS_HEADERS = {"accept-ranges", "cache-control", "content-length", "content-type", "etag", "last-modified",
                       "date", "server", "vary", "x-amz-request-id", f"x-amz-meta-{MD5_METADATA}",
                       "seaweed-x-amz-etag", "seaweed-x-amz-owner"}
NAME_WORDS = ("gold", "better", "worse", "reference", "amplified", "original", "crops", "overview", "flow",
              "farneback", "dis_", "scene", "demo_", "stimuli")


def test_presigned_responses_carry_no_name_path_or_file_time(s3, folder):
    """Every file a scene shows (candidate images, which gold pairs show too, reference, crops), fetched as a worker
    fetches it: no Content-Disposition, no metadata but the content's MD5, an ETag from the bytes,
    a Last-Modified that is the upload's moment and not the file's time; If-None-Match gives 304."""
    import hashlib

    old = datetime.datetime(2001, 9, 9, tzinfo=datetime.timezone.utc).timestamp()
    for path in folder.rglob("*.png"):
        os.utime(path, (old, old))
    storage = _storage(s3)
    shown = _shown(folder)
    scene = next(p for p in folder.iterdir() if p.is_dir())
    gold = json.loads((scene / "manifest.json").read_text())["gold"]  # pairs of candidates: their files
    assert gold and {f"{scene.name}/{g[side]['amplified']}" for g in gold for side in ("better", "worse")} <= set(
        shown.values())
    before = datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0) - datetime.timedelta(seconds=1)
    storage.upload_files(folder, "demo", shown, progress=False)
    after = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=1)
    for name, relative in shown.items():
        data = (folder / relative).read_bytes()
        md5 = hashlib.md5(data).hexdigest()
        response = requests.get(storage.url("demo", name), timeout=10)
        assert response.status_code == 200 and response.content == data
        headers = {k.lower(): v for k, v in response.headers.items()}
        assert set(headers) <= S3_STIMULUS_HEADERS, sorted(set(headers) - S3_STIMULUS_HEADERS)
        assert "content-disposition" not in headers
        assert headers["etag"] == f'"{md5}"' and headers[f"x-amz-meta-{MD5_METADATA}"] == md5
        modified = datetime.datetime.strptime(headers["last-modified"], "%a, %d %b %Y %H:%M:%S GMT")
        assert before <= modified.replace(tzinfo=datetime.timezone.utc) <= after  # the upload, not 2001
        text = " ".join(f"{k}: {v}" for k, v in headers.items()).lower()
        stem = Path(relative).stem.lower()
        assert stem not in text and not [w for w in NAME_WORDS if w in text], (relative, text)
        cached = requests.get(storage.url("demo", name), headers={"If-None-Match": headers["etag"]}, timeout=10)
        assert cached.status_code == 304 and cached.content == b""


def test_tampered_and_expired_urls_are_refused(s3, folder, monkeypatch):
    storage = _storage(s3)
    shown = _shown(folder)
    storage.upload_files(folder, "demo", shown, progress=False)
    name, other = sorted(shown)[:2]
    url = storage.url("demo", name)
    assert requests.get(url, timeout=10).status_code == 200
    tampered_key = url.replace(name, other)               # someone else's signature
    assert requests.get(tampered_key, timeout=10).status_code == 403
    signature = url.rsplit("X-Amz-Signature=", 1)[1][:64]
    flipped = ("0" if signature[0] != "0" else "1") + signature[1:]
    assert requests.get(url.replace(signature, flipped), timeout=10).status_code == 403
    assert requests.get(url.split("?")[0], timeout=10).status_code == 403   # unsigned: the bucket is private
    # Expiry without waiting for it: URLs signed two minutes ago (botocore's signing clock moved back).
    # One valid for a minute is refused; one valid for ten is not, so the age alone is not the reason.
    signed_at = botocore.compat.get_current_datetime() - datetime.timedelta(minutes=2)
    monkeypatch.setattr(botocore.auth, "get_current_datetime", lambda remove_tzinfo=True: signed_at)
    key = storage.key("demo", name)
    assert requests.get(storage.presign(key, expires=600), timeout=10).status_code == 200
    assert requests.get(storage.presign(key, expires=60), timeout=10).status_code == 403


def test_public_base_url_mode():
    storage = S3Storage("bucket", prefix="stim", public_base_url="https://cdn.example.org/base/",
                        client=object())  # never used: public URLs are not signed
    assert storage.url("my-study", "scene 1/ref#1.png") == "https://cdn.example.org/base/stim/my-study/scene%201/ref%231.png"
    assert S3Storage("b", prefix="", public_base_url="https://x.org", client=object()).url("s", "a.png") == \
        "https://x.org/s/a.png"
    assert storage.url_form().startswith("public: https://cdn.example.org/base/stim/<study>/<name>")


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
        missing.upload_files(folder, "demo", _shown(folder), progress=False)
    (port,) = free_ports(1)
    unreachable = S3Storage(s3["bucket"], endpoint_url=f"http://127.0.0.1:{port}")
    with pytest.raises(StorageError, match=f"cannot reach the S3 endpoint http://127.0.0.1:{port}"):
        unreachable.check()
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "wrong")
    with pytest.raises(StorageError, match="access denied"):
        _storage(s3).check()
    with pytest.raises(StorageError, match="stimulus folder .* does not exist"):
        _storage(s3).upload_files(folder / "nothing", "demo", _shown(folder), progress=False)
    with pytest.raises(StorageError, match="1 stimulus file\\(s\\) of study demo are missing, e.g. .*gone.png"):
        _storage(s3).upload_files(folder, "demo", {**_shown(folder), "0" * 32 + ".png": "gone.png"}, progress=False)


def _s3_env(s3, **extra) -> dict[str, str]:
    return {"PERCEPTLAB_STORAGE_BACKEND": "s3", "PERCEPTLAB_STORAGE_BUCKET": s3["bucket"],
            "PERCEPTLAB_STORAGE_ENDPOINT_URL": s3["endpoint_url"], "PERCEPTLAB_STORAGE_PREFIX": s3["prefix"],
            "PERCEPTLAB_CONFIG": "", **extra}


def _shown_by_study(app, slug: str) -> tuple[Path, dict[str, str]]:
    """The study's stimulus root and {URL name: path} of the images its rows name."""
    from sqlalchemy import select

    from server.models import Stimulus, Study, StudySet

    with app_services(app).sessions() as session:
        study = session.scalar(select(Study).where(Study.slug == slug))
        paths = set()
        for study_set in study.sets:
            paths.update([study_set.reference["full"], *study_set.reference["crops"], study_set.overview])
        for stimulus in session.scalars(select(Stimulus).join(StudySet).where(StudySet.study_id == study.id)):
            paths.update([stimulus.full, *stimulus.crops["paths"]])
        name_of = name_maker(study, app.config["SECRET_KEY"])
        return Path(study.stimulus_root), {name_of(p): p for p in paths if p}


def test_cli_upload_and_check(s3, app, demo_stimuli, tmp_path):
    from server.cli import cli

    slug = create_test_study(app, demo_stimuli, tmp_path, **SMALL_STUDY)
    root, shown = _shown_by_study(app, slug)
    files = {name: (root / path).stat().st_size for name, path in shown.items()}
    assert len(files) < sum(1 for p in root.rglob("*") if p.is_file())  # manifests, originals: not shown
    runner = CliRunner()
    database = ["--database-url", app.config["DATABASE_URL"]]

    result = runner.invoke(cli, ["storage", "upload", slug, *database, "--progress"], env=_s3_env(s3))
    assert result.exit_code == 0, result.output
    assert f"upload {slug}: 100%" in result.output                      # the tqdm bar (on stderr)
    assert f"{slug}: {len(files)} uploaded" in result.output and "0 unchanged" in result.output
    assert _objects(s3, f"{s3['prefix']}/{slug}/") == {f"{s3['prefix']}/{slug}/{k}": v for k, v in files.items()}
    result = runner.invoke(cli, ["storage", "upload", slug, *database], env=_s3_env(s3))
    assert result.exit_code == 0 and f"0 uploaded (0 B), {len(files)} unchanged" in result.output, result.output
    assert "warning" not in result.output

    result = runner.invoke(cli, ["storage", "check"], env=_s3_env(s3))
    assert result.exit_code == 0, result.output
    assert f"bucket {s3['bucket']!r} at {s3['endpoint_url']}: ok" in result.output
    assert f"URLs: presigned: {s3['endpoint_url']}/{s3['bucket']}/{s3['prefix']}/<study>/<name>?" in result.output

    result = runner.invoke(cli, ["storage", "upload", "nope", *database], env=_s3_env(s3))
    assert result.exit_code == 2 and "error: no study 'nope'" in result.output
    result = runner.invoke(cli, ["storage", "upload", slug, *database],
                           env=_s3_env(s3, PERCEPTLAB_STORAGE_BACKEND="local"))
    assert result.exit_code == 2 and "error: the storage backend is not s3" in result.output
    assert "PERCEPTLAB_STORAGE_BUCKET" in result.output
    result = runner.invoke(cli, ["storage", "check"], env=_s3_env(s3, PERCEPTLAB_STORAGE_BUCKET="missing-bucket"))
    assert result.exit_code == 2 and "error: S3 bucket 'missing-bucket' does not exist" in result.output


def test_cli_upload_of_a_study_without_salt_uses_the_server_key_and_prunes(s3, app, demo_stimuli, tmp_path):
    """A study made before salts existed: names from the server's secret key, as the server makes them."""
    from sqlalchemy import select, update

    from server.cli import cli
    from server.models import Study

    slug = create_test_study(app, demo_stimuli, tmp_path, **SMALL_STUDY)
    salted = _shown_by_study(app, slug)[1]
    with app_services(app).sessions() as session:
        config = dict(session.scalar(select(Study.config).where(Study.slug == slug)))
        del config[SALT_KEY]
        session.execute(update(Study).where(Study.slug == slug).values(config=config))
        session.commit()
    root, shown = _shown_by_study(app, slug)
    assert not set(shown) & set(salted)
    database = ["--database-url", app.config["DATABASE_URL"]]
    runner = CliRunner()
    nowhere = {**_s3_env(s3, PERCEPTLAB_SERVER_INSTANCE_PATH=str(tmp_path / "cli-instance")),
               "PERCEPTLAB_SECRET_KEY": None}
    result = runner.invoke(cli, ["storage", "upload", slug, *database], env=nowhere)
    assert result.exit_code == 2 and "PERCEPTLAB_SECRET_KEY" in result.output, result.output
    assert not _objects(s3, f"{s3['prefix']}/{slug}/")

    s3_client(s3["endpoint_url"]).put_object(Bucket=s3["bucket"], Key=f"{s3['prefix']}/{slug}/manifest.json",
                                             Body=b"{}")   # left by an older, path-style upload
    env = _s3_env(s3, PERCEPTLAB_SECRET_KEY=app.config["SECRET_KEY"])
    result = runner.invoke(cli, ["storage", "upload", slug, *database], env=env)
    assert result.exit_code == 0, result.output
    assert "warning: 1 object(s) under this prefix are not shown by the study" in result.output
    result = runner.invoke(cli, ["storage", "upload", slug, *database, "--prune"], env=env)
    assert result.exit_code == 0 and "deleted 1 object(s)" in result.output, result.output
    assert _objects(s3, f"{s3['prefix']}/{slug}/") == \
        {f"{s3['prefix']}/{slug}/{name}": (root / path).stat().st_size for name, path in shown.items()}


def test_app_with_s3_backend_serves_presigned_urls(s3, database_url, demo_stimuli, tmp_path):
    """The State of a worker's page holds presigned URLs of opaque keys that fetch the study's files."""
    from server import create_app
    from server.config import load_config

    from .stimulus_support import PATH_WORDS, trial_paths

    config = load_config(_s3_env(s3))
    app = create_app(config, database_url=database_url, instance_path=str(tmp_path / "instance"),
                     secret_key="test-secret", testing=True)
    try:
        slug = create_test_study(app, demo_stimuli, tmp_path, **SMALL_STUDY)
        storage = app_services(app).storage
        assert isinstance(storage, S3Storage)
        root, shown = _shown_by_study(app, slug)
        storage.upload_files(root, slug, shown, progress=False)
        worker = WorkerClient(app.test_client(), slug, platform="link")
        state = worker.start()
        base = f"{s3['endpoint_url']}/{s3['bucket']}/{s3['prefix']}/{slug}/"
        fetched = 0
        for trial in state["page"]["trials"]:
            for side, (full, crops) in trial_paths(app, trial["trial_id"]).items():
                image = trial[side]
                for url, path in [(image["full"], full), *zip([c["url"] for c in image["crops"]], crops)]:
                    name = url.removeprefix(base).split("?")[0]
                    assert url.startswith(base) and re.fullmatch(r"[0-9a-f]{32}\.png", name), url
                    assert not [w for w in PATH_WORDS if w in name]
                    response = requests.get(url, timeout=10)
                    assert response.status_code == 200 and response.headers["Content-Type"] == "image/png"
                    assert response.content == (root / path).read_bytes()
                    fetched += 1
        assert fetched >= 18  # 3 quiz trials x 3 images x (full + crop)
        trial = state["page"]["trials"][0]
        assert worker.state()["page"]["trials"][0]["left"]["full"] == trial["left"]["full"]  # cached URL
    finally:
        app_services(app).engine.dispose()
