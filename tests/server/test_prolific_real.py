"""Prolific's real API, read-only, opt-in: skipped unless PROLIFIC_TOKEN is set (nothing here creates, changes or
pays anything: the account, the list of studies and one study's submissions only). The rest of server/prolific.py is tested against the
fake Prolific (tests/server/test_prolific.py)."""
from __future__ import annotations

import os

import pytest

from server.prolific import ProlificClient

pytestmark = pytest.mark.skipif(not os.environ.get("PROLIFIC_TOKEN"),
                                reason="set PROLIFIC_TOKEN to run the read-only calls against Prolific's API")


def test_the_token_reaches_the_account_and_its_studies():
    client = ProlificClient()
    try:
        me = client.me()
        assert me.get("id")
        studies = client.list_studies()  # every page
        assert all(s.id and s.status for s in studies)
        if studies:  # read-only: the submissions list, paged by limit/offset against meta.count
            submissions = client.study_submissions(studies[0].id)
            assert all(s.id and s.status for s in submissions)
    finally:
        client.close()
