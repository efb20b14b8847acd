"""Where stimulus files live and the URLs workers load them from.

Two backends, picked by ``[storage] backend`` (see ``server/default_config.toml``):

``local`` (default)
    The local folder each study's manifests are in, served by the ``stimuli`` blueprint
    under ``/stimuli/<slug>/<name>``. Behind nginx, ``accel_redirect`` and ``accel_root`` let the app
    only authorise each request and hand the file to nginx (``X-Accel-Redirect`` to an ``internal``
    location that aliases ``accel_root``: sendfile and ranges, no app thread held while it streams).
``s3``
    An S3 bucket (AWS or any S3-compatible store: SeaweedFS, MinIO, Ceph, R2...). Objects are
    keyed ``<prefix>/<study slug>/<name>``; ``perceptlab storage upload STUDY`` copies the files the
    study shows there. Browsers load them from presigned GET URLs, or from
    ``public_base_url`` when the bucket (or a CDN in front of it) is public. Credentials come
    only from the environment and the AWS files (``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``,
    ``AWS_PROFILE``...), never from perceptlab's config files; instance roles (the EC2 metadata
    service) only with ``[storage] use_instance_metadata = true``.

``<name>`` is a file's opaque name (:mod:`server.stimulus_index`): the backends never see the
stimulus folder's paths in URLs or keys, only names that tell a worker nothing.

boto3 is imported only when an S3 backend first needs a client, so the local backend and the
CLI's other commands do not pay for it.
"""
from __future__ import annotations

import hashlib
import mimetypes
import sys
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import quote

CACHE_CONTROL = "public, max-age=31536000, immutable"  # a stimulus file never changes under its key
MD5_METADATA = "perceptlab-md5"  # S3 metadata key: hex MD5 of the whole file (multipart ETags are not MD5s)
EXTRA_TYPES = {".webp": "image/webp", ".avif": "image/avif", ".json": "application/json", ".svg": "image/svg+xml"}


class Storage(Protocol):
    def url(self, study_slug: str, name: str) -> str:
        """The URL a browser loads the study's stimulus published as ``name`` from."""


class StorageError(Exception):
    """A storage problem explained in one line (missing bucket, unreachable endpoint, no credentials)."""


class LocalStorage:
    """Stimuli served by this server from the study's stimulus folder (``views/stimuli.py``).

    Parameters
    ----------
    accel_redirect : str
        ``[storage] accel_redirect``: the URI prefix of nginx's ``internal`` location for stimulus files
        (e.g. ``/_protected_stimuli/``), or "" for the app to send the files itself.
    accel_root : str or Path
        ``[storage] accel_root``: the folder that location aliases; study folders under it are streamed by
        nginx, others still by the app.
    """

    def __init__(self, accel_redirect: str = "", accel_root: str | Path = "") -> None:
        if accel_redirect and not (accel_redirect.startswith("/") and accel_redirect.endswith("/")):
            raise StorageError(f"[storage] accel_redirect must be a URI prefix like \"/_protected_stimuli/\", "
                               f"got {accel_redirect!r}")
        if accel_redirect and not accel_root:
            raise StorageError("[storage] accel_redirect needs accel_root: the folder its nginx location aliases")
        self.accel_redirect = accel_redirect
        self.accel_root = Path(accel_root).resolve() if accel_redirect else None

    def url(self, study_slug: str, name: str) -> str:
        return _local_url(study_slug, name)

    def internal_uri(self, path: str | Path) -> str | None:
        """The URI nginx's internal location sends the file ``path`` from, or None: no accel configured,
        or ``path`` lies outside ``accel_root`` (the app then sends it itself)."""
        if self.accel_root is None:
            return None
        try:
            relative = Path(path).resolve().relative_to(self.accel_root)
        except ValueError:
            return None
        return self.accel_redirect + quote(relative.as_posix(), safe="/")


@lru_cache(maxsize=1 << 15)
def _local_url(study_slug: str, name: str) -> str:
    # Remembered: a page's state names about a hundred images, and quote() is not cheap.
    return f"/stimuli/{quote(study_slug)}/{quote(name)}"


@dataclass
class UploadReport:
    uploaded: list[str] = field(default_factory=list)   # keys written
    skipped: list[str] = field(default_factory=list)    # keys already holding the same bytes
    stale: list[str] = field(default_factory=list)      # keys under the study's prefix that it does not use
    deleted: list[str] = field(default_factory=list)    # stale keys removed (``prune``)
    bytes_uploaded: int = 0
    bytes_total: int = 0
    seconds: float = 0.0

    @property
    def files(self) -> int:
        return len(self.uploaded) + len(self.skipped)

    def summary(self) -> str:
        return (f"{len(self.uploaded)} uploaded ({_size(self.bytes_uploaded)}), {len(self.skipped)} unchanged, "
                f"{self.files} files ({_size(self.bytes_total)}) in {self.seconds:.1f} s")


def _size(n: float) -> str:
    if n < 1000:
        return f"{n:.0f} B"
    for unit in ("kB", "MB", "GB"):
        n /= 1000
        if n < 1000 or unit == "GB":
            break
    return f"{n:.1f} {unit}"


def content_type(path: str | Path) -> str:
    guessed, _ = mimetypes.guess_type(str(path), strict=False)
    return guessed or EXTRA_TYPES.get(Path(path).suffix.lower(), "application/octet-stream")


def file_sha256(path: Path) -> str:
    """The SHA-256 of a file's bytes, in hex: what a backup's manifest and launch's source check record."""
    with path.open("rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def file_md5(path: Path, chunk: int = 1 << 20) -> str:
    digest = hashlib.md5(usedforsecurity=False)
    with path.open("rb") as f:
        while block := f.read(chunk):
            digest.update(block)
    return digest.hexdigest()


class S3Storage:
    """Stimuli in an S3 bucket under ``<prefix>/<study slug>/<name>``.

    Parameters
    ----------
    bucket : str
    prefix : str
        Key prefix shared by all studies ("" for none).
    endpoint_url : str, optional
        For S3-compatible stores (e.g. ``http://127.0.0.1:8333``); those get path-style
        addressing. Empty: AWS (or ``AWS_ENDPOINT_URL``).
    region : str
    public_base_url : str, optional
        When set, URLs are ``public_base_url/<key>`` (a public bucket or a CDN) and nothing is signed.
    presign_seconds : int
        Lifetime of presigned URLs. A URL is reused for a quarter of it, so each one handed out
        is valid for at least three quarters of ``presign_seconds``.
    multipart_threshold_mb : float
        Files from this size up are uploaded in parts of this size.
    client : optional
        A ready boto3 S3 client (default: made on first use from the environment and ~/.aws files).
    use_instance_metadata : bool
        Also ask the EC2 instance metadata service / container endpoint for credentials
        (``[storage] use_instance_metadata``; off by default: see :mod:`server.aws`).
    """

    CACHE_FRACTION = 0.25
    CACHE_SIZE = 20_000
    UPLOAD_THREADS = 8

    def __init__(self, bucket: str, *, prefix: str = "stimuli", endpoint_url: str | None = None,
                 region: str = "us-east-1", public_base_url: str = "", presign_seconds: int = 21600,
                 multipart_threshold_mb: float = 8, client: Any = None,
                 clock: Callable[[], float] = time.monotonic, use_instance_metadata: bool = False) -> None:
        if not bucket:
            raise StorageError("no S3 bucket configured: set [storage] bucket (or PERCEPTLAB_STORAGE_BUCKET)")
        if presign_seconds <= 0:
            raise StorageError(f"[storage] presign_seconds must be positive, got {presign_seconds}")
        self.bucket = bucket
        self.prefix = prefix.strip("/")
        self.endpoint_url = endpoint_url or None
        self.region = region or None
        self.public_base_url = (public_base_url or "").rstrip("/")
        self.presign_seconds = int(presign_seconds)
        self.multipart_threshold = max(int(float(multipart_threshold_mb) * (1 << 20)), 1)
        self._client = client
        self.use_instance_metadata = bool(use_instance_metadata)
        self._clock = clock
        self._lock = threading.Lock()
        self._urls: OrderedDict[str, tuple[float, str]] = OrderedDict()

    @classmethod
    def from_config(cls, section: dict[str, Any], **kwargs: Any) -> S3Storage:
        return cls(section.get("bucket", ""), prefix=section.get("prefix", "stimuli"),
                   endpoint_url=section.get("endpoint_url") or None, region=section.get("region", "us-east-1"),
                   public_base_url=section.get("public_base_url", ""),
                   presign_seconds=section.get("presign_seconds", 21600),
                   multipart_threshold_mb=section.get("multipart_threshold_mb", 8),
                   use_instance_metadata=section.get("use_instance_metadata", False), **kwargs)

    # ------------------------------------------------------------------ client and keys

    @property
    def client(self):
        if self._client is None:
            with self._lock:
                if self._client is None:
                    from botocore.config import Config

                    from .aws import boto3_session

                    style = "path" if self.endpoint_url else "auto"
                    config = Config(signature_version="s3v4", s3={"addressing_style": style},
                                    retries={"max_attempts": 3, "mode": "standard"}, connect_timeout=5,
                                    read_timeout=60, max_pool_connections=self.UPLOAD_THREADS * 2)
                    session = boto3_session(use_instance_metadata=self.use_instance_metadata)
                    self._client = session.client("s3", endpoint_url=self.endpoint_url,
                                                  region_name=self.region, config=config)
        return self._client

    def key(self, study_slug: str, name: str) -> str:
        name = name.replace("\\", "/").lstrip("/")
        return "/".join(part for part in (self.prefix, study_slug, name) if part)

    @property
    def where(self) -> str:
        return f"bucket {self.bucket!r} at {self.endpoint_url or 'AWS S3'}"

    # ------------------------------------------------------------------ URLs

    def url(self, study_slug: str, name: str) -> str:
        key = self.key(study_slug, name)
        if self.public_base_url:
            return f"{self.public_base_url}/{quote(key)}"
        now = self._clock()
        with self._lock:
            hit = self._urls.get(key)
            if hit is not None and hit[0] > now:
                self._urls.move_to_end(key)
                return hit[1]
        url = self.presign(key)
        with self._lock:
            self._urls[key] = (now + self.presign_seconds * self.CACHE_FRACTION, url)
            self._urls.move_to_end(key)
            while len(self._urls) > self.CACHE_SIZE:
                self._urls.popitem(last=False)
        return url

    def presign(self, key: str, expires: int | None = None) -> str:
        """A fresh presigned GET URL for ``key`` (signed locally: no request is made)."""
        try:
            return self.client.generate_presigned_url(
                "get_object", Params={"Bucket": self.bucket, "Key": key},
                ExpiresIn=self.presign_seconds if expires is None else expires)
        except Exception as exc:
            raise self._explain(exc) from exc

    def url_form(self) -> str:
        """How URLs look, for ``perceptlab storage check``."""
        example = self.key("<study>", "<name>")
        if self.public_base_url:
            return f"public: {self.public_base_url}/{example}"
        base = self.endpoint_url or f"https://{self.bucket}.s3.{self.region or 'us-east-1'}.amazonaws.com"
        shown = f"{base.rstrip('/')}/{self.bucket}/{example}" if self.endpoint_url else f"{base}/{example}"
        return (f"presigned: {shown}?X-Amz-Signature=... (valid {self.presign_seconds} s, "
                f"reused for {self.presign_seconds * self.CACHE_FRACTION:.0f} s)")

    # ------------------------------------------------------------------ checks and errors

    def check(self) -> None:
        """Raise :class:`StorageError` unless the bucket exists and these credentials may use it."""
        try:
            self.client.head_bucket(Bucket=self.bucket)
        except Exception as exc:
            raise self._explain(exc) from exc

    def _explain(self, exc: Exception) -> StorageError:
        from botocore import exceptions as bx

        if isinstance(exc, StorageError):
            return exc
        if isinstance(exc, bx.NoCredentialsError):
            return StorageError(f"no S3 credentials for {self.where}: set AWS_ACCESS_KEY_ID and "
                                "AWS_SECRET_ACCESS_KEY (or AWS_PROFILE) in the environment")
        if isinstance(exc, (bx.EndpointConnectionError, bx.ConnectTimeoutError)):
            return StorageError(f"cannot reach the S3 endpoint {self.endpoint_url or 'of AWS'} "
                                f"(check [storage] endpoint_url / PERCEPTLAB_STORAGE_ENDPOINT_URL): {exc}")
        if isinstance(exc, bx.ClientError):
            error = exc.response.get("Error", {})
            code = str(error.get("Code", ""))
            status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
            if code in ("NoSuchBucket", "404", "NotFound") or (status == 404 and "Bucket" in exc.operation_name):
                return StorageError(f"S3 bucket {self.bucket!r} does not exist at {self.endpoint_url or 'AWS S3'} "
                                    "(create it, or fix [storage] bucket / PERCEPTLAB_STORAGE_BUCKET)")
            if code in ("403", "AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "Forbidden"):
                return StorageError(f"access denied to {self.where} ({code}): check the credentials in "
                                    "AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY and the bucket's policy")
            return StorageError(f"S3 error on {self.where}: {code or status} {error.get('Message', '')}".rstrip())
        if isinstance(exc, bx.BotoCoreError):
            return StorageError(f"S3 error on {self.where}: {exc}")
        return StorageError(f"{type(exc).__name__} on {self.where}: {exc}")

    # ------------------------------------------------------------------ upload

    def upload_files(self, local_root: str | Path, study_slug: str, files: Mapping[str, str], *,
                     progress: bool | None = None, prune: bool = False) -> UploadReport:
        """Upload the named files to ``<prefix>/<study_slug>/<name>``; skip unchanged ones.

        Parameters
        ----------
        local_root : str or Path
            The study's stimulus folder.
        study_slug : str
        files : mapping
            Opaque name -> path relative to ``local_root`` (a study's
            :class:`~server.stimulus_index.StimulusIndex`): only these files go up.
        progress : bool, optional
            A tqdm bar on stderr (default: when stderr is a terminal).
        prune : bool
            Delete the objects under the study's prefix that are not among ``files`` (left by
            earlier uploads); without it they are only listed in ``report.stale``.

        A file is unchanged when an object of the same size exists whose ``perceptlab-md5``
        metadata matches the file's MD5.
        """
        from boto3.s3.transfer import TransferConfig

        started = time.monotonic()
        root = Path(local_root)
        if not root.is_dir():
            raise StorageError(f"stimulus folder {root} does not exist")
        sources = {name: root / relative for name, relative in sorted(files.items())}
        missing = [str(path) for path in sources.values() if not path.is_file()]
        if missing:
            raise StorageError(f"{len(missing)} stimulus file(s) of study {study_slug} are missing, "
                               f"e.g. {missing[0]}")
        self.check()
        existing = self._list_sizes(self.key(study_slug, "") + "/")
        report = UploadReport(bytes_total=sum(p.stat().st_size for p in sources.values()))
        wanted = {self.key(study_slug, name) for name in sources}
        report.stale = sorted(key for key in existing if key not in wanted)
        transfer = TransferConfig(multipart_threshold=self.multipart_threshold,
                                  multipart_chunksize=max(self.multipart_threshold, 5 << 20),  # S3's smallest part
                                  max_concurrency=4, use_threads=True)
        if progress is None:
            progress = sys.stderr.isatty()
        bar = None
        if progress:
            from tqdm import tqdm

            bar = tqdm(total=report.bytes_total, unit="B", unit_scale=True, unit_divisor=1024,
                       desc=f"upload {study_slug}", file=sys.stderr)
        lock = threading.Lock()

        def one(name: str, path: Path) -> None:
            key = self.key(study_slug, name)
            size = path.stat().st_size
            md5 = file_md5(path)
            if existing.get(key) == size and self._stored_md5(key) == md5:
                with lock:
                    report.skipped.append(key)
                if bar is not None:
                    bar.update(size)
                return
            self.client.upload_file(
                str(path), self.bucket, key, Config=transfer,
                Callback=(bar.update if bar is not None else None),
                ExtraArgs={"ContentType": content_type(name), "CacheControl": CACHE_CONTROL,
                           "Metadata": {MD5_METADATA: md5}})
            with lock:
                report.uploaded.append(key)
                report.bytes_uploaded += size

        try:
            with ThreadPoolExecutor(max_workers=self.UPLOAD_THREADS) as pool:
                for future in [pool.submit(one, name, path) for name, path in sources.items()]:
                    future.result()
            if prune and report.stale:
                self._delete(report.stale)
                report.deleted = list(report.stale)
        except Exception as exc:
            raise self._explain(_unwrap(exc)) from exc
        finally:
            if bar is not None:
                bar.close()
        report.uploaded.sort()
        report.skipped.sort()
        report.seconds = time.monotonic() - started
        return report

    def _delete(self, keys: list[str]) -> None:
        for start in range(0, len(keys), 1000):  # S3's largest DeleteObjects batch
            batch = [{"Key": key} for key in keys[start:start + 1000]]
            answer = self.client.delete_objects(Bucket=self.bucket, Delete={"Objects": batch, "Quiet": True})
            if answer.get("Errors"):
                error = answer["Errors"][0]
                raise StorageError(f"could not delete {error.get('Key')} from {self.where}: "
                                   f"{error.get('Code')} {error.get('Message', '')}".rstrip())

    def _list_sizes(self, prefix: str) -> dict[str, int]:
        sizes: dict[str, int] = {}
        try:
            for page in self.client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=prefix):
                for item in page.get("Contents", []):
                    sizes[item["Key"]] = item["Size"]
        except Exception as exc:
            raise self._explain(exc) from exc
        return sizes

    def _stored_md5(self, key: str) -> str | None:
        from botocore.exceptions import ClientError

        try:
            head = self.client.head_object(Bucket=self.bucket, Key=key)
        except ClientError as exc:
            if exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode") == 404:
                return None
            raise
        return head.get("Metadata", {}).get(MD5_METADATA)


def _unwrap(exc: BaseException) -> Exception:
    """boto3's transfer manager wraps client errors (S3UploadFailedError): find the botocore one."""
    from botocore.exceptions import BotoCoreError, ClientError

    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, (ClientError, BotoCoreError)):
            return seen
        seen = seen.__cause__ or seen.__context__
    return exc  # type: ignore[return-value]


def make_storage(config: dict[str, Any]) -> Storage:
    """The backend named by ``[storage] backend``: "local" (default) or "s3"."""
    section = config.get("storage", {}) or {}
    backend = (section.get("backend") or "local").lower()
    if backend == "local":
        return LocalStorage(section.get("accel_redirect", ""), section.get("accel_root", ""))
    if backend == "s3":
        return S3Storage.from_config(section)
    raise StorageError(f"unknown [storage] backend {backend!r}: use \"local\" or \"s3\"")


__all__ = [
    "CACHE_CONTROL",
    "MD5_METADATA",
    "LocalStorage",
    "S3Storage",
    "Storage",
    "StorageError",
    "UploadReport",
    "content_type",
    "make_storage",
]
