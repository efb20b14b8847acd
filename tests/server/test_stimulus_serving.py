"""Stimulus URLs are opaque and only the files a study shows are served (SQLite and PostgreSQL).

Every URL a worker gets (paired-comparison and motion State, the HIT preview, the instructions page)
is ``/stimuli/<slug>/<32 hex digits>.png`` and serves exactly the file the database row names; flow
files, manifests, unreferenced images, path-style URLs, traversal attempts, other studies' names
and unknown studies are all the same 404. Names survive restarts.
"""
from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path

from sqlalchemy import select, update

from server.models import Study
from server.paradigms.paired.models import Pair, Trial
from server.paradigms.motion.models import MotionClip
from server.services import app_services
from server.stimulus_index import SALT_KEY, name_maker

from .conftest import SMALL_STUDY, WorkerClient, create_test_study
from .motion_support import SMALL, MotionWorker, create_motion_study
from .stimulus_support import PATH_WORDS, trial_paths


def opaque(slug: str) -> re.Pattern:
    return re.compile(rf"/stimuli/{re.escape(slug)}/[0-9a-f]{{32}}\.png")


def assert_serves(client, url: str, slug: str, path: Path) -> None:
    """``url`` is opaque, tells nothing, and serves exactly ``path`` as a cacheable PNG."""
    assert opaque(slug).fullmatch(url), url
    tail = url.split(f"/stimuli/{slug}/", 1)[1].lower()
    assert not [word for word in PATH_WORDS if word in tail], url
    response = client.get(url)
    assert response.status_code == 200, url
    assert response.data == path.read_bytes(), f"{url} does not serve {path}"
    assert response.mimetype == "image/png"
    assert_headers_tell_nothing(response, path)


# Every header a stimulus response may carry: none names the file, its path or a time of it.
STIMULUS_HEADERS = {"Content-Type", "Content-Length", "ETag", "Cache-Control", "Accept-Ranges", "Date",
                    "X-Content-Type-Options", "Referrer-Policy", "Content-Security-Policy",
                    "X-Request-ID"}  # a random id per request (server/metrics.py): it tells nothing of the file


def assert_headers_tell_nothing(response, path: Path) -> None:
    """Every header of a stimulus response: the fixed set above, the ETag a hash of the bytes alone
    (not the mtime or the path), no file name, path word, modification time or expiry date."""
    data = path.read_bytes()
    names = set(response.headers.keys())
    assert names == STIMULUS_HEADERS, sorted(names ^ STIMULUS_HEADERS)
    assert response.headers["Content-Type"] == "image/png"
    assert response.headers["Content-Length"] == str(len(data))
    assert response.headers["ETag"] == f'"{hashlib.blake2b(data, digest_size=16).hexdigest()}"'
    assert response.headers["Cache-Control"] == "public, max-age=86400"
    assert response.headers["Accept-Ranges"] == "bytes"
    text = " ".join(f"{k}: {v}" for k, v in response.headers.items() if k != "Content-Security-Policy").lower()
    assert path.stem.lower() not in text and path.name.lower() not in text
    assert not [word for word in PATH_WORDS if word in text], text
    assert str(int(path.stat().st_mtime)) not in text


def study_row(app, slug: str) -> Study:
    with app_services(app).sessions() as session:
        study = session.scalar(select(Study).where(Study.slug == slug))
        session.expunge(study)
        return study


def gold_side(app, trial: dict) -> str:
    """The correct side of a gold trial, from the database (URLs must not tell)."""
    with app_services(app).sessions() as session:
        row = session.get(Trial, int(trial["trial_id"]))
        pair: Pair = row.pair
        if pair.gold_winner_id is None:
            return "left"
        left = pair.stimulus_a_id if row.left_is_a else pair.stimulus_b_id
        return "left" if left == pair.gold_winner_id else "right"


def check_page(app, client, slug: str, root: Path, page: dict) -> int:
    checked = 0
    for trial in page["trials"]:
        expected = trial_paths(app, trial["trial_id"])
        for side, (full, crops) in expected.items():
            image = trial[side]
            assert_serves(client, image["full"], slug, root / full)
            assert len(image["crops"]) == len(crops)
            for crop, path in zip(image["crops"], crops):
                assert_serves(client, crop["url"], slug, root / path)
            checked += 1 + len(crops)
    return checked


def img_sources(html: str) -> list[str]:
    return re.findall(r'<img[^>]*\ssrc="([^"]+)"', html)


# ---------------------------------------------------------------- paired comparison

def test_every_paired_state_and_page_url_serves_its_file(app, study, demo_stimuli):
    client = app.test_client()
    root = Path(study_row(app, study).stimulus_root)
    worker = WorkerClient(client, study, platform="link")
    state = worker.start()
    assert state["page"]["kind"] == "quiz"
    checked = check_page(app, client, study, root, state["page"])
    worker.answer_page(lambda trial: gold_side(app, trial))
    state = worker.state()
    assert state["stage"] == "trials" and state["page"]["kind"] == "trials"
    checked += check_page(app, client, study, root, state["page"])
    assert checked > 40

    with app_services(app).sessions() as session:
        first_set = session.scalar(select(Study).where(Study.slug == study)).sets[0]
        reference, overview = first_set.reference["full"], first_set.overview
    preview = client.get(f"/s/{study}?assignmentId=ASSIGNMENT_ID_NOT_AVAILABLE&hitId=H1")
    assert preview.status_code == 200
    sources = [s for s in img_sources(preview.get_data(as_text=True)) if s.startswith("/stimuli/")]
    assert sources == [worker_url(app, study, reference)]
    assert_serves(client, sources[0], study, root / reference)

    newcomer = client.get(f"/s/{study}?participant=P-instructions", follow_redirects=True)
    assert newcomer.status_code == 200
    consent = client.post(newcomer.request.path + "consent", data={"agree": "yes"}, follow_redirects=True)
    sources = [s for s in img_sources(consent.get_data(as_text=True)) if s.startswith("/stimuli/")]
    assert sources == [worker_url(app, study, overview or reference)]
    assert_serves(client, sources[0], study, root / (overview or reference))


def worker_url(app, slug: str, path: str) -> str:
    """The URL a worker page shows for ``path`` (the naming rule, applied from outside the app)."""
    study = study_row(app, slug)
    return f"/stimuli/{slug}/{name_maker(study, app.config['SECRET_KEY'])(path)}"


def test_validators_come_from_the_bytes_and_conditional_gets_still_work(app, demo_stimuli, tmp_path):
    """ETags are content hashes: a new mtime changes nothing, a 304 answers a repeated GET, ranges
    work, and two files with the same bytes under different names share one ETag (so it cannot tell
    a path); gold and real trials' files alike."""
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(demo_stimuli / "prepared", copy / "prepared")
    slug = create_test_study(app, copy, tmp_path, **SMALL_STUDY)
    client = app.test_client()
    root = Path(study_row(app, slug).stimulus_root)
    state = WorkerClient(client, slug, platform="link").start()
    trial = state["page"]["trials"][0]
    paths = trial_paths(app, trial["trial_id"])
    url, path = trial["left"]["full"], root / paths["left"][0]
    first = client.get(url)
    assert_headers_tell_nothing(first, path)
    etag = first.headers["ETag"]

    os.utime(path, (1_000_000_000, 1_000_000_000))  # another mtime, as a copy or a restore would give
    again = client.get(url)
    assert again.headers["ETag"] == etag and "Last-Modified" not in again.headers
    cached = client.get(url, headers={"If-None-Match": etag})
    assert cached.status_code == 304 and cached.data == b""
    assert set(cached.headers.keys()) <= STIMULUS_HEADERS and cached.headers["ETag"] == etag
    assert client.get(url, headers={"If-None-Match": '"0123"'}).status_code == 200
    part = client.get(url, headers={"Range": "bytes=0-7"})
    assert part.status_code == 206 and part.data == path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert part.headers["Content-Range"] == f"bytes 0-7/{path.stat().st_size}"

    # The right image's file gets the left one's bytes: its ETag becomes the left one's.
    other_url, other = trial["right"]["full"], root / paths["right"][0]
    assert client.get(other_url).headers["ETag"] != etag
    other.write_bytes(path.read_bytes())
    assert client.get(other_url).headers["ETag"] == etag


def test_gold_trials_show_only_urls_that_real_trials_show(app, study):
    """A gold trial's images are candidates' files: every URL of a quiz (gold) trial is also the URL of
    a candidate some real pair of the study shows, so neither a URL, a byte count nor the number of
    times a URL recurs marks a trial as gold."""
    from server.paradigms.paired.models import Stimulus, StudySet

    client = app.test_client()
    row = study_row(app, study)
    name_of = name_maker(row, app.config["SECRET_KEY"])
    with app_services(app).sessions() as session:
        real = session.scalars(select(Pair).join(StudySet).where(StudySet.study_id == row.id, ~Pair.is_gold)).all()
        shown = {stimulus_id for pair in real for stimulus_id in (pair.stimulus_a_id, pair.stimulus_b_id)}
        real_urls = set()
        for stimulus in session.scalars(select(Stimulus).where(Stimulus.id.in_(shown))):
            real_urls.update(f"/stimuli/{study}/{name_of(p)}" for p in (stimulus.full, *stimulus.crops["paths"]))
    state = WorkerClient(client, study, platform="link").start()
    assert state["page"]["kind"] == "quiz" and len(state["page"]["trials"]) == 3
    for trial in state["page"]["trials"]:
        for side in ("left", "right"):
            urls = [trial[side]["full"], *(crop["url"] for crop in trial[side]["crops"])]
            assert set(urls) <= real_urls, trial["trial_id"]


def test_unreferenced_files_path_urls_traversal_and_probing_404(app, study, demo_stimuli, tmp_path):
    client = app.test_client()
    row = study_row(app, study)
    root = Path(row.stimulus_root)
    name_of = name_maker(row, app.config["SECRET_KEY"])
    files = sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())
    # The study shows amplified images: the originals and the manifests are in the folder but not shown.
    unreferenced = [f for f in files if f.endswith(".json") or "/original/" in f]
    assert len(unreferenced) >= 40 and any(f.endswith("manifest.json") for f in unreferenced)
    not_found = client.get(f"/stimuli/{study}/{'0' * 32}.png")
    assert not_found.status_code == 404
    for relative in unreferenced:
        # Even whoever could compute the opaque name of an unreferenced file gets nothing.
        assert client.get(f"/stimuli/{study}/{name_of(relative)}").status_code == 404, relative
    for relative in files:  # the old path-style URLs, referenced or not
        assert client.get(f"/stimuli/{study}/{relative}").status_code == 404, relative

    served = worker_url(app, study, study_reference(app, study))
    assert client.get(served).status_code == 200
    for probe in (f"/stimuli/{study}/../{study}/{served.rsplit('/', 1)[1]}",
                  f"/stimuli/{study}/..%2F..%2Finstance%2Fsecret_key", f"/stimuli/{study}/%2e%2e%2fmanifest.json",
                  f"/stimuli/{study}/{root}/manifest.json", f"/stimuli/{study}/%2F{str(root).lstrip('/')}",
                  "/stimuli/..%2F..%2Fetc/passwd", f"/stimuli/{study}/"):
        assert client.get(probe).status_code == 404, probe

    # An unknown study and another study's name answer exactly like an unknown name.
    other = create_test_study(app, demo_stimuli, tmp_path, slug="other", **SMALL_STUDY)
    reference = study_reference(app, study)
    mine, theirs = worker_url(app, study, reference), worker_url(app, other, reference)
    assert mine.rsplit("/", 1)[1] != theirs.rsplit("/", 1)[1]  # per-study keys: names do not link studies
    assert client.get(theirs).status_code == 200
    for probe in (f"/stimuli/no-such-study/{mine.rsplit('/', 1)[1]}", f"/stimuli/{study}/{theirs.rsplit('/', 1)[1]}"):
        response = client.get(probe)
        assert (response.status_code, response.data, response.mimetype) == \
            (not_found.status_code, not_found.data, not_found.mimetype), probe


def study_reference(app, slug: str) -> str:
    with app_services(app).sessions() as session:
        return session.scalar(select(Study).where(Study.slug == slug)).sets[0].reference["full"]


def test_names_are_distinct_stable_across_restarts_and_legacy_studies_get_a_derived_key(
        app, study, demo_stimuli, database_url, tmp_path):
    first = WorkerClient(app.test_client(), study, platform="link").start()["page"]
    urls = {url for trial in first["trials"] for side in ("reference", "left", "right")
            for url in (trial[side]["full"], *(c["url"] for c in trial[side]["crops"]))}
    paths = {path for trial in first["trials"] for full, crops in trial_paths(app, trial["trial_id"]).values()
             for path in (full, *crops)}
    assert len(urls) == len(paths) > 10  # one name per file, never two files under one name

    def preview_image(secret: str) -> str:
        """The HIT preview's image URL from a freshly started app (it must serve its file)."""
        from server import create_app

        restarted = create_app(database_url=database_url, instance_path=str(tmp_path / "instance"),
                               secret_key=secret, testing=True)
        try:
            client = restarted.test_client()
            html = client.get(f"/s/{study}?assignmentId=ASSIGNMENT_ID_NOT_AVAILABLE&hitId=H1").get_data(as_text=True)
            (url,) = [s for s in img_sources(html) if s.startswith("/stimuli/")]
            assert_serves(client, url, study, root / study_reference(restarted, study))
            return url
        finally:
            app_services(restarted).engine.dispose()

    root = Path(study_row(app, study).stimulus_root)
    before = preview_image("test-secret")
    assert before == worker_url(app, study, study_reference(app, study))
    assert preview_image("test-secret") == before
    assert preview_image("another-secret") == before   # the study's own salt: the server key does not matter

    # A study created before salts existed: its key derives from the server's secret key.
    with app_services(app).sessions() as session:
        config = dict(session.scalar(select(Study.config).where(Study.slug == study)))
        del config[SALT_KEY]
        session.execute(update(Study).where(Study.slug == study).values(config=config))
        session.commit()
    legacy = preview_image("test-secret")
    assert legacy != before and preview_image("test-secret") == legacy
    assert preview_image("another-secret") != legacy


# ---------------------------------------------------------------- motion

def test_every_motion_url_serves_its_file_and_flow_files_404(app, motion_clips, tmp_path):
    slug = create_motion_study(app, motion_clips, tmp_path, **SMALL)
    client = app.test_client()
    row = study_row(app, slug)
    root = Path(row.stimulus_root)
    with app_services(app).sessions() as session:
        clips = [clip.frames["paths"] for clip in session.scalars(select(MotionClip).where(MotionClip.study_id == row.id))]

    preview = client.get(f"/s/{slug}?assignmentId=ASSIGNMENT_ID_NOT_AVAILABLE&hitId=H1")
    sources = [s for s in img_sources(preview.get_data(as_text=True)) if s.startswith("/stimuli/")]
    middle = clips[0][len(clips[0]) // 2]
    assert sources == [worker_url(app, slug, middle)]
    assert_serves(client, sources[0], slug, root / middle)

    worker = MotionWorker(app, slug)
    state = worker.start()
    assert_serves(client, state["params"]["noise_url"], slug, root / row.config["noise"])
    assert worker.calibrate().status_code == 200
    worker.answer_block()
    state = worker.state()
    assert state["stage"] == "main" and state["trials"]
    for trial in state["trials"]:
        frames = trial["clip"]["frames"]
        served = []
        for url in frames:
            assert opaque(slug).fullmatch(url), url
            response = client.get(url)
            assert response.status_code == 200 and response.mimetype == "image/png"
            served.append(response.data)
        # The movie is a run of consecutive frames of one clip, in order.
        runs = [[(root / p).read_bytes() for p in paths[k:k + len(frames)]]
                for paths in clips for k in range(len(paths) - len(frames) + 1)]
        assert served in runs

    name_of = name_maker(row, app.config["SECRET_KEY"])
    hidden = sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.suffix in (".flo", ".json"))
    assert len([p for p in hidden if p.endswith(".flo")]) >= 10
    for relative in hidden:
        assert client.get(f"/stimuli/{slug}/{name_of(relative)}").status_code == 404, relative
        assert client.get(f"/stimuli/{slug}/{relative}").status_code == 404, relative


def test_rdk_dot_movies_carry_no_name_time_or_size_that_differs(app, motion_clips, tmp_path):
    """The other worker-facing media: an RDK trial's dot movie has no file name, time or validator,
    and every trial's movie has the same length whatever its direction and speed."""
    slug = create_motion_study(app, motion_clips, tmp_path, **SMALL)
    worker = MotionWorker(app, slug)
    worker.start()
    assert worker.calibrate().status_code == 200
    state = worker.state()
    assert state["stage"] == "rdk"
    lengths, directions = set(), set()
    for trial in state["trials"]:
        response = worker.dots(trial["trial_id"])
        assert response.status_code == 200
        names = set(response.headers.keys())
        assert names == {"Content-Type", "Content-Length", "Cache-Control", "X-Content-Type-Options",
                         "Referrer-Policy", "Content-Security-Policy", "X-Request-ID"}, names
        assert response.headers["Content-Type"] == "application/octet-stream"
        assert response.headers["Cache-Control"] == "private, max-age=86400, immutable"
        lengths.add(response.headers["Content-Length"])
        directions.add(worker.gt(trial["trial_id"]))
    assert len(lengths) == 1 and len(directions) > 1


def test_with_accel_redirect_the_app_authorises_and_hands_the_file_to_nginx(app, demo_stimuli, tmp_path):
    """``[storage] accel_redirect``: a study's file under ``accel_root`` is answered with its validators and
    the internal URI nginx streams it from, and no bytes; a matching If-None-Match is still the app's 304;
    files outside ``accel_root`` the app still sends itself. (nginx's half: tests/server/test_nginx_deploy.py.)"""
    import pytest

    from server.config import load_config
    from server.storage import LocalStorage, StorageError, make_storage

    slug = create_test_study(app, demo_stimuli, tmp_path, **SMALL_STUDY)
    root = Path(study_row(app, slug).stimulus_root)
    trial = WorkerClient(app.test_client(), slug, platform="link").start()["page"]["trials"][0]
    url, path = trial["left"]["full"], root / trial_paths(app, trial["trial_id"])["left"][0]
    data = path.read_bytes()
    services = app_services(app)
    plain = services.storage
    config = load_config({"PERCEPTLAB_STORAGE_ACCEL_REDIRECT": "/_protected/",
                          "PERCEPTLAB_STORAGE_ACCEL_ROOT": str(root.parent)})
    try:
        services.storage = make_storage(config)
        client = app.test_client()
        handed = client.get(url)
        relative = path.resolve().relative_to(root.parent.resolve()).as_posix()
        assert handed.status_code == 200 and handed.data == b""
        assert handed.headers["X-Accel-Redirect"] == f"/_protected/{relative}"
        assert handed.mimetype == "image/png"  # nginx keeps the type, sends the file's length
        etag = f'"{hashlib.blake2b(data, digest_size=16).hexdigest()}"'
        assert handed.headers["ETag"] == etag and handed.headers["Cache-Control"] == "public, max-age=86400"
        cached = client.get(url, headers={"If-None-Match": etag})
        assert cached.status_code == 304 and "X-Accel-Redirect" not in cached.headers
        path.write_bytes(data + b"\0")  # a changed file gets a new ETag, not the remembered one
        assert client.get(url).headers["ETag"] != etag
        path.write_bytes(data)
        assert client.get("/stimuli/" + slug + "/" + "0" * 32 + ".png").status_code == 404

        services.storage = LocalStorage("/_protected/", tmp_path / "elsewhere")  # the study lies outside
        served = client.get(url)
        assert served.data == data and "X-Accel-Redirect" not in served.headers
    finally:
        services.storage = plain
    with pytest.raises(StorageError, match="needs accel_root"):
        LocalStorage("/_protected/")
    with pytest.raises(StorageError, match="URI prefix"):
        LocalStorage("_protected", root)
