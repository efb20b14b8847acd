"""Entry fingerprints (server/fingerprints.py, issue 38 item 5): a worker's first entry stores keyed hashes of
its network (/24, /48) and User-Agent, never the raw values; workers.csv carries them as address_group and
agent_group; they never refuse an entry; through an export they reach the sock-puppet test. On SQLite and
PostgreSQL (the ``app`` fixture)."""
from __future__ import annotations

import csv
import io
import json

import numpy as np
from sqlalchemy import select

from server import exports
from server.fingerprints import address_prefix, entry_fingerprint
from server.models import Study, Worker
from server.services import app_services

from .conftest import WorkerClient

SECRET = "test-secret"
CHROME = "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0 Safari/537.36"
FIREFOX = "Mozilla/5.0 (X11; Linux x86_64; rv:133.0) Gecko/20100101 Firefox/133.0"


def _enter(app, slug: str, worker_id: str, address: str, agent: str) -> WorkerClient:
    client = app.test_client()
    client.environ_base.update({"REMOTE_ADDR": address, "HTTP_USER_AGENT": agent})
    return WorkerClient(client, slug, worker_id=worker_id)


def _stored(app, slug: str) -> dict[str, Worker]:
    with app_services(app).sessions() as session:
        study_id = session.scalar(select(Study.id).where(Study.slug == slug))
        rows = session.scalars(select(Worker).where(Worker.study_id == study_id)).all()
        session.expunge_all()
        return {w.external_id: w for w in rows}


def test_address_prefix_keeps_the_network_only():
    assert address_prefix("203.0.113.77") == "203.0.113.0/24"
    assert address_prefix("::ffff:203.0.113.9") == "203.0.113.0/24"
    assert address_prefix("2001:db8:abcd:12:1::7") == "2001:db8:abcd::/48"
    assert address_prefix("not an address") == address_prefix(None) == ""
    same = entry_fingerprint(SECRET, "s", "198.51.100.1", CHROME)
    assert same == entry_fingerprint(SECRET, "s", "198.51.100.254", CHROME)
    assert same.address_group != entry_fingerprint(SECRET, "other", "198.51.100.1", CHROME).address_group
    assert same.address_group != entry_fingerprint("another secret", "s", "198.51.100.1", CHROME).address_group
    assert entry_fingerprint(SECRET, "s", "", "") == ("", "")


def test_entry_stores_keyed_groups_and_workers_csv_exports_them(app, study, admin):
    _enter(app, study, "WNEIGHBOUR1", "203.0.113.7", CHROME)
    _enter(app, study, "WNEIGHBOUR2", "203.0.113.200", CHROME)     # same /24, same browser
    _enter(app, study, "WV6A", "2001:db8:abcd:1::5", FIREFOX)
    _enter(app, study, "WV6B", "2001:db8:abcd:ffff::9", CHROME)    # same /48
    _enter(app, study, "WAFAR", "192.0.2.10", FIREFOX)
    stored = _stored(app, study)
    groups = {w: (row.address_group, row.agent_group) for w, row in stored.items()}
    assert groups["WNEIGHBOUR1"] == groups["WNEIGHBOUR2"]
    assert groups["WNEIGHBOUR1"] == tuple(entry_fingerprint(SECRET, study, "203.0.113.7", CHROME))
    assert groups["WV6A"][0] == groups["WV6B"][0] and groups["WV6A"][1] != groups["WV6B"][1]
    assert groups["WAFAR"][0] != groups["WNEIGHBOUR1"][0] and groups["WAFAR"][1] == groups["WV6A"][1]
    assert all(len(a) == len(b) == 16 for a, b in groups.values())
    # Never the raw values: no stored text of the worker holds the address or the browser.
    for row in stored.values():
        text = " ".join(str(getattr(row, c.key)) for c in Worker.__table__.columns)
        assert "203.0.113" not in text and "2001:db8" not in text and "Mozilla" not in text

    # A re-entry (a reload, another address) keeps the first entry's groups.
    again = app.test_client()
    again.environ_base.update({"REMOTE_ADDR": "198.51.100.3", "HTTP_USER_AGENT": FIREFOX})
    first = _stored(app, study)["WNEIGHBOUR1"]
    response = again.post(f"/api/v1/studies/{study}/assignments",
                          json={"platform": "mturk", "worker_id": "WNEIGHBOUR1", "assignment_id": "A2NEWHIT0001",
                                "hit_id": "HIT1", "turk_submit_to": "https://workersandbox.mturk.com"})
    assert response.status_code == 201, response.json   # the same worker's second assignment
    assert _stored(app, study)["WNEIGHBOUR1"].address_group == first.address_group

    download = admin.get(f"/admin/studies/{study}/workers.csv")
    assert download.status_code == 200
    rows = {r["worker_id"]: r for r in csv.DictReader(io.StringIO(download.get_data(as_text=True)))}
    salt = exports.study_salt(SECRET, study)
    for raw, (address, agent) in groups.items():
        row = rows[exports.pseudonym(salt, raw)]
        assert (row["address_group"], row["agent_group"]) == (address, agent)


def test_shared_fingerprints_never_refuse_an_entry(app, study):
    """Thirty identities from one address and one browser all get in: only the analysis uses fingerprints."""
    for k in range(30):
        assert _enter(app, study, f"WSAME{k:02d}", "203.0.113.50", CHROME).entry["stage"] != "full"
    assert len({(w.address_group, w.agent_group) for w in _stored(app, study).values()}) == 1


def test_fingerprints_stored_at_entry_reach_the_sock_puppet_test(app, study, admin, tmp_path):
    """The whole path: every identity of a simulated study enters over the API (the puppets from one /24, the
    others each from a network of their own), workers.csv is downloaded, and `perceptlab analyze --workers`
    on the votes (under the same pseudonyms) sets the puppets' weak lean aside as a group sharing an
    address_group, which the same votes without workers.csv leave pooled and uncaught."""
    from dataclasses import replace

    from click.testing import CliRunner

    from analysis.formats import write_votes
    from analysis.simulate import add_one_page_identities, simulate_study
    from server.cli import cli

    crowd = simulate_study(n_sets=4, n_items=8, degree=7, votes_per_pair=20, n_workers=20, random_clickers=0.0,
                           left_clickers=0.0, seed=6)
    simulated = add_one_page_identities(add_one_page_identities(crowd, 0.15, colluding=False, seed=13),
                                        0.10, target_item=3, collusion_bias=1.0, seed=19)
    votes, target = simulated.votes, str(simulated.item_ids[3])
    ids = [str(w) for w in votes.worker_ids]
    for k, worker in enumerate(ids):
        address = f"203.0.113.{k}" if worker.startswith("P") else f"10.{k}.0.1"
        _enter(app, study, worker, address, CHROME)
    workers_csv = tmp_path / "workers.csv"
    workers_csv.write_text(admin.get(f"/admin/studies/{study}/workers.csv").get_data(as_text=True))
    salt = exports.study_salt(SECRET, study)
    write_votes(tmp_path / "votes.csv", replace(votes, worker_ids=np.array([exports.pseudonym(salt, w) for w in ids])))

    def coordinated(*extra: str) -> list[tuple[str, str | None]]:
        out = tmp_path / f"out{len(extra)}"
        result = CliRunner().invoke(cli, ["analyze", str(tmp_path / "votes.csv"), "--out", str(out), "--bootstrap",
                                          "0", "--no-plots", *extra])
        assert result.exit_code == 0, result.output
        summary = json.loads((out / "summary.json").read_text())["sockpuppets"]
        return [(i["item_id"], i.get("evidence")) for i in summary["coordinated_items"]]

    assert (target, None) not in coordinated()
    assert (target, "address_group") in coordinated("--workers", str(workers_csv))
