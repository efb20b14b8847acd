"""A study's files never change under its URLs (issue 38, item 10), on SQLite and PostgreSQL.

The attack: a second rating study created from the same prepared folder, in another instance, rewrote the
first study's quality-check images (its training and hidden checks) with new bytes under the same URLs,
which browsers and proxies keep for a day. Check images are now named by their content
(server/paradigms/rating/study.py, ``content_name``): a second study gets files of its own, or the very same
bytes, and a file already there is never rewritten.
"""
from __future__ import annotations

from pathlib import Path

from sqlalchemy import select

from server.models import Study
from server.services import app_services
from server.stimulus_index import StimulusIndex

from .conftest import make_test_app
from .rating_support import SMALL, write_rating_study


def create_rating_study(app, manifest: Path, folder: Path, slug: str, seed: int) -> str:
    """A small DCR study with quality checks and the given seed, created in ``app``'s database."""
    from server.paradigms import create_study, read_study_file

    path = write_rating_study(folder, manifest, slug, **SMALL)
    path.write_text(path.read_text().replace("[study]\n", f"[study]\nseed = {seed}\n", 1))
    with app_services(app).sessions() as session:
        create_study(session, read_study_file(path))
        session.commit()
    return slug


def _served(app, slug: str) -> dict[str, tuple[bytes, str | None]]:
    """Every file the study serves, by URL: its bytes and ETag, as a browser receives them."""
    with app_services(app).sessions() as session:
        study = session.scalar(select(Study).where(Study.slug == slug))
        index = StimulusIndex.build(session, study, app.config["SECRET_KEY"])
    client = app.test_client()
    served = {}
    for name, _ in index.items():
        response = client.get(f"/stimuli/{slug}/{name}")
        assert response.status_code == 200, name
        served[f"/stimuli/{slug}/{name}"] = (response.get_data(), response.headers.get("ETag"))
    return served


def _files(folder: Path) -> dict[str, tuple[int, bytes]]:
    """Every file under ``folder``: its modification time (ns) and bytes."""
    return {str(p.relative_to(folder)): (p.stat().st_mtime_ns, p.read_bytes())
            for p in sorted(folder.rglob("*")) if p.is_file()}


def test_a_second_study_in_another_instance_leaves_the_first_studys_files_alone(app, rating_manifest, tmp_path,
                                                                               sqlite_template):
    first = create_rating_study(app, rating_manifest, tmp_path, "first", 1)
    before = _served(app, first)
    assert len(before) > 4
    files_before = _files(rating_manifest.parent)

    import shutil

    other_folder = tmp_path / "other"
    other_folder.mkdir()
    shutil.copyfile(sqlite_template, other_folder / "perceptlab.db")
    other = make_test_app(f"sqlite:///{other_folder / 'perceptlab.db'}", other_folder / "instance")
    try:
        # Another instance, the same slug, another seed: its checks are padded to other sizes.
        create_rating_study(other, rating_manifest, other_folder, "first", 2)
        second = _served(other, "first")
        assert _served(app, first) == before  # the first study's URLs serve the very same bytes
        # ... and a third study with the first one's seed: the same check files, shared byte for byte.
        create_rating_study(other, rating_manifest, other_folder, "third", 1)
        third = _served(other, "third")
    finally:
        app_services(other).engine.dispose()

    assert _served(app, first) == before
    files_after = _files(rating_manifest.parent)
    assert {k: v for k, v in files_after.items() if k in files_before} == files_before  # nothing rewritten
    new_files = set(files_after) - set(files_before)
    assert new_files and all("/rating/" in f"/{name}" for name in new_files)  # the second study's own checks
    assert {data for data, _ in second.values()} - {data for data, _ in before.values()}
    assert {data for data, _ in third.values()} == {data for data, _ in before.values()}
