"""Against the real MTurk sandbox (no money): balance, then create, expire and delete a tiny HIT.

Runs only with ``PERCEPTLAB_MTURK_SANDBOX=1`` and AWS credentials in the environment
(``AWS_ACCESS_KEY_ID`` / ``AWS_SECRET_ACCESS_KEY`` or ``AWS_PROFILE``) for an account linked
to a sandbox requester account.
"""
from __future__ import annotations

import datetime as dt
import os
import uuid

import pytest
from sqlalchemy import select

from server.models import MTurkHit, Study
from server.mturk import MTurkService, make_client
from server.services import app_services

pytestmark = pytest.mark.skipif(os.environ.get("PERCEPTLAB_MTURK_SANDBOX") != "1",
                                reason="real MTurk sandbox test: set PERCEPTLAB_MTURK_SANDBOX=1 and AWS credentials "
                                       "(AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY or AWS_PROFILE)")


@pytest.fixture
def sandbox_client():
    import boto3

    if boto3.session.Session().get_credentials() is None:
        pytest.skip("PERCEPTLAB_MTURK_SANDBOX=1 but no AWS credentials: set AWS_ACCESS_KEY_ID and "
                    "AWS_SECRET_ACCESS_KEY (or AWS_PROFILE)")
    return make_client()


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_sandbox_balance_and_a_tiny_hit(sandbox_client, app, study):
    with app_services(app).sessions() as db:
        service = MTurkService(sandbox_client, db)
        assert service.sandbox
        assert service.balance()  # "10000.00" in the sandbox
        s = db.scalar(select(Study).where(Study.slug == study))
        s.config = {**s.config, "mturk": {"title": f"perceptlab sandbox test {uuid.uuid4().hex[:6]}",
                                          "min_approved_hits": 0, "min_approval_rate": 0, "locales": []}}
        db.commit()
        [hit] = service.launch(s, assignments_total=1, url="https://example.org/s/test",
                               lifetime=dt.timedelta(minutes=10))
        assert hit.hit_id and hit.status == "Assignable"
        try:
            service.expire_hit(hit.hit_id)
        finally:
            service.delete_hit(hit.hit_id)
            db.commit()
        assert db.scalar(select(MTurkHit.status)) == "deleted"
