"""Scale-out: two app instances (two gunicorn masters on two ports, as on two hosts) on one
PostgreSQL database and one S3 bucket (SeaweedFS) serve one study.

Simulated workers switch instance on every request (entry, state, actions, votes), re-send some
acknowledged votes to the other instance and send some votes to both at once; then both
instances' dashboards ask for the running scale estimate at the same moment. The harness
(instances, driver, checks) is ``benchmarks/scale_out.py``, which runs the same setup harder.

Everything is checked from outside: HTTP answers, the database's rows, the bucket's objects,
and a trigger on ``scale_snapshot`` that logs every stored snapshot (one per computation),
whichever process computes it.
"""
from __future__ import annotations

import os
import uuid

import pytest

from benchmarks.scale_out import (
    Dashboard,
    S3Bucket,
    ScaleOutCluster,
    StudyShape,
    check_database,
    check_stimuli,
    drive,
    refresh_together,
    snapshot_computations,
    wait_for_snapshot,
)
from tests.server.s3_fixture import make_bucket, seaweed_s3  # noqa: F401

pytestmark = [pytest.mark.timeout(300), pytest.mark.slow]

# 4 scenes x 11 methods at degree 4: 88 pairs, 264 target votes. 16 workers asking for up to 6 pages
# of 8 pairs could give 768 votes, so the study fills up and the pair limit is contested at the end.
SHAPE = StudyShape(degree=4, votes_per_pair=3, pairs_per_page=8, max_pages=6, seed=13)
WORKERS, CONCURRENCY = 16, 8


@pytest.fixture
def cluster(postgres_url, seaweed_s3, demo_stimuli, tmp_path):  # noqa: F811
    """The demo study on a fresh database, its stimuli in a fresh bucket, served by two instances."""
    s3 = S3Bucket(seaweed_s3["endpoint_url"], make_bucket(seaweed_s3), f"scale-{uuid.uuid4().hex[:6]}",
                  seaweed_s3["access_key"], seaweed_s3["secret_key"])
    manifest = demo_stimuli / "prepared" / "manifest.json"
    # The background refresh is off: the dashboards alone ask for the running scales here.
    with ScaleOutCluster(postgres_url, manifest, s3, tmp_path / "cluster", shape=SHAPE, instances=2,
                         gunicorn_workers=2, threads=2, live_scales_interval=0) as running:
        yield running


def test_two_instances_serve_one_study(cluster, postgres_url):
    a, b = cluster.instances
    assert a.port != b.port and a.process.pid != b.process.pid
    assert "uploaded" in cluster.upload_output, cluster.upload_output

    report = drive(cluster.urls, cluster.slug, workers=WORKERS, concurrency=CONCURRENCY, pages=SHAPE.max_pages,
                   seed=int(os.environ.get("PERCEPTLAB_SCALE_OUT_SEED", "0")), resend_rate=0.2, race_rate=0.1)
    summary = report.to_dict()

    # Both instances did real work: entries, states and stored votes on each.
    assert not report.errors, summary
    assert report.outcomes["error"] == 0 and report.unresolved == 0, summary
    assert set(report.stored_by) == {"a", "b"} and min(report.stored_by.values()) > 0, summary
    # Tokens signed by one instance work on the other, and a retried vote is answered from the database:
    # sent again elsewhere after it was stored, or to both at once, it is stored exactly once.
    assert set(report.resends) == {"duplicate"} and report.resends["duplicate"] > 0, summary
    assert set(report.races) == {"one stored, one duplicate"}, summary

    database = check_database(postgres_url, cluster.slug, report)
    assert database.over_target == 0, database
    assert database.repeated_pairs == 0 and report.repeated_pairs() == 0, database
    assert database.lost == 0 and database.duplicated == 0 and database.unacknowledged == 0, database
    assert database.acknowledged == database.stored == len(report.votes), database
    # The workers outnumbered the work: most pairs reached their target, so the limit was contested.
    assert database.pairs_at_target >= 0.9 * database.pairs, database
    assert report.outcomes["full"] + report.outcomes["completed"] == WORKERS, summary

    stimuli = check_stimuli(report, cluster.s3, cluster.slug)
    assert stimuli.images > 0 and not stimuli.not_in_bucket and not stimuli.unsigned, stimuli
    assert stimuli.fetched == stimuli.images and not stimuli.failed, stimuli
    served_by = {host for hosts in report.image_sources.values() for host in hosts}
    assert served_by == {cluster.s3.endpoint_url.split("//", 1)[1]}  # no image URL points at an instance

    # Two experimenters, one at each instance, open the dashboard and ask for a refresh at the same moment.
    dashboards = [Dashboard(url, cluster.admin_user, cluster.admin_password) for url in cluster.urls]
    assert dashboards[0].get("/admin/api/studies", base_url=b.url).status_code == 200  # one login, both hosts
    assert snapshot_computations(postgres_url, cluster.slug) == []
    answers = refresh_together(dashboards, cluster.slug)
    assert all(refresh in (200, 202) and summary_status == 200 for refresh, summary_status in answers), answers
    votes = wait_for_snapshot(postgres_url, cluster.slug)
    assert votes == database.stored
    # Asked again, neither recomputes: the stored snapshot already covers every vote.
    assert all(d.get(f"/admin/api/studies/{cluster.slug}/summary").status_code == 200 for d in dashboards)
    cluster.stop()  # nothing can compute any more: the log is final
    computations = snapshot_computations(postgres_url, cluster.slug)
    assert [c.n_votes for c in computations] == [votes], computations
