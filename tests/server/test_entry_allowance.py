"""Limits that fit a lab (issue 28): signed links are not limited per address, a study may set its own
``[entry] entry_limit``, and every 429 names the setting that lifts it (the JSON's ``setting``, a line
of the HTML page)."""
from __future__ import annotations

from sqlalchemy import select

from server.models import Study
from server.paradigms.entry import link_signature
from server.services import app_services

from .conftest import SMALL_STUDY, create_test_study, make_test_app

LAB = "192.0.2.44"  # every computer of the lab room, behind one address


def _app(database_url, tmp_path, clock, **overrides):
    return make_test_app(database_url, tmp_path / "instance", clock=clock, entry_limit=2, entry_window_seconds=600,
                         **overrides)


def _page_entry(app, slug: str, participant: str, **query):
    client = app.test_client()
    client.environ_base["REMOTE_ADDR"] = LAB
    return client.get(f"/s/{slug}", query_string={"participant": participant, **query})


def _api_entry(app, slug: str, participant: str, **fields):
    client = app.test_client()
    client.environ_base["REMOTE_ADDR"] = LAB
    return client.post(f"/api/v1/studies/{slug}/assignments",
                       json={"platform": "link", "worker_id": participant, **fields})


def test_the_429_names_the_setting_on_the_page_and_in_the_json(database_url, tmp_path, clock, demo_stimuli):
    app = _app(database_url, tmp_path, clock)
    slug = create_test_study(app, demo_stimuli, tmp_path, **SMALL_STUDY)
    assert [_page_entry(app, slug, f"P{i}").status_code for i in range(2)] == [302, 302]
    page = _page_entry(app, slug, "P2")
    assert page.status_code == 429
    html = page.get_data(as_text=True)
    assert "Too many new sessions" in html and "[entry] entry_limit" in html and "signed_links" in html
    refused = _api_entry(app, slug, "P3")
    assert refused.status_code == 429 and refused.json["error"] == "rate_limited"
    assert "[entry] entry_limit" in refused.json["setting"] and "[server] entry_limit" in refused.json["setting"]


def test_signed_links_are_not_limited_per_address(database_url, tmp_path, clock, demo_stimuli):
    app = _app(database_url, tmp_path, clock)
    slug = create_test_study(app, demo_stimuli, tmp_path, entry={"signed_links": True}, **SMALL_STUDY)
    with app_services(app).sessions() as session:
        secret = session.scalar(select(Study.entry_secret).where(Study.slug == slug))
    codes = [_page_entry(app, slug, f"L{i}", sig=link_signature(secret, slug, f"L{i}")).status_code
             for i in range(12)]
    assert codes == [302] * 12  # a lab session of 12 behind one address, over the server's limit of 2
    api = [_api_entry(app, slug, f"M{i}", signature=link_signature(secret, slug, f"M{i}")).status_code
           for i in range(3)]
    assert api == [201] * 3
    # The signature is still required: an invented participant is refused, not counted.
    assert _page_entry(app, slug, "Invented", sig="0" * 32).status_code == 403
    # A study without signed links, from the same address, still meets the server's limit.
    plain = create_test_study(app, demo_stimuli, tmp_path, slug="plain", **SMALL_STUDY)
    assert [_api_entry(app, plain, f"Q{i}").status_code for i in range(3)] == [201, 201, 429]


def test_a_study_sets_its_own_allowance_per_address(database_url, tmp_path, clock, demo_stimuli):
    app = _app(database_url, tmp_path, clock)
    lab = create_test_study(app, demo_stimuli, tmp_path, slug="lab", entry={"entry_limit": 5}, **SMALL_STUDY)
    open_study = create_test_study(app, demo_stimuli, tmp_path, slug="open", entry={"entry_limit": 0}, **SMALL_STUDY)
    other = create_test_study(app, demo_stimuli, tmp_path, slug="other", **SMALL_STUDY)
    assert [_api_entry(app, lab, f"P{i}").status_code for i in range(6)] == [201] * 5 + [429]
    assert [_api_entry(app, open_study, f"P{i}").status_code for i in range(8)] == [201] * 8
    # The lab study's allowance spent nothing of the server-wide one, which other studies use.
    assert [_api_entry(app, other, f"P{i}").status_code for i in range(3)] == [201, 201, 429]
    clock.advance(seconds=601)  # the window moves on
    assert _api_entry(app, lab, "P6").status_code == 201


def test_a_study_file_with_a_negative_allowance_is_refused(tmp_path, demo_stimuli):
    import pytest

    from server.paradigms import read_study_file
    from server.paradigms.studyfile import StudyDefinitionError

    from .conftest import write_study_file

    path = write_study_file(tmp_path, demo_stimuli, entry={"entry_limit": -5})
    with pytest.raises(StudyDefinitionError, match="entry_limit"):
        read_study_file(path)


def test_simulate_names_the_setting_of_the_limit_it_met(database_url, tmp_path, clock, demo_stimuli):
    import threading

    from werkzeug.serving import make_server

    from server.simulate_client import run_simulation

    app = _app(database_url, tmp_path, clock)
    slug = create_test_study(app, demo_stimuli, tmp_path, pages=SMALL_STUDY["pages"],
                             quality={"quiz_size": 0, "gold_rate": 0.0})
    server = make_server("127.0.0.1", 0, app, threaded=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:  # one attempt per request: a worker refused at entry gives up at once instead of waiting 10 minutes
        report = run_simulation(f"http://127.0.0.1:{server.server_port}", slug, workers=4, spam=0.0, concurrency=1,
                                seed=1, pages=1, observer="latent", progress=False, max_attempts=1)
    finally:
        server.shutdown()
        thread.join(timeout=10)
    assert report.outcomes["completed"] == 2 and report.outcomes["error"] == 2
    assert report.errors["rate_limited"] == 2
    line = next(line for line in report.summary_lines() if line.startswith("limit met"))
    assert "rate_limited, 2 answers" in line and "[entry] entry_limit" in line and "signed_links" in line


def test_an_entry_whose_signature_the_caller_checked_is_not_limited_per_address(database_url, tmp_path, clock,
                                                                                demo_stimuli):
    """``admission(..., signed=True)``: for entries signed otherwise than by a study's links (a pilot's)."""
    import pytest

    from server.errors import ApiError
    from server.paradigms.core import spec_for
    from server.views.entry_limit import admission

    app = _app(database_url, tmp_path, clock)
    slug = create_test_study(app, demo_stimuli, tmp_path, **SMALL_STUDY)
    with app_services(app).sessions() as session:
        study = session.scalar(select(Study).where(Study.slug == slug))
        spec = spec_for(session, study.id)
    with app.test_request_context(environ_base={"REMOTE_ADDR": LAB}):
        for _ in range(5):
            admission(study, spec, "mturk", signed=True)()
        for _ in range(2):
            admission(study, spec, "mturk")()
        with pytest.raises(ApiError) as refused:
            admission(study, spec, "mturk")()
        assert refused.value.code == "rate_limited"
