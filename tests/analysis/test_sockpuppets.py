"""Sock puppets: colluding votes spread over one-page identities (analysis/sockpuppets.py) and analyze's use of it."""
from __future__ import annotations

import csv
import json
from dataclasses import replace

import numpy as np
import pytest
from click.testing import CliRunner

from analysis.formats import write_votes
from analysis.pipeline import AnalysisOptions, analyze
from analysis.scaling import ScalingOptions
from analysis.simulate import add_one_page_identities, simulate_study
from analysis.sockpuppets import coordinated_identities
from server.cli import cli

TARGET = 3  # m003, as in benchmarks/collusion.py and benchmarks/sockpuppets.py


def _crowd(seed: int, method_sd: float = 0.8):
    """benchmarks/collusion.py's honest crowd: 20 workers answer all 28 pairs of 4 sets x 8 items."""
    return simulate_study(n_sets=4, n_items=8, degree=7, votes_per_pair=20, n_workers=20, random_clickers=0.0,
                          left_clickers=0.0, method_sd=method_sd, seed=seed)


def _everyone(votes) -> np.ndarray:
    return np.ones(len(votes.worker_ids), dtype=bool)


def test_one_page_identities_carry_the_share_of_votes_and_meet_the_target_rarely():
    study = add_one_page_identities(_crowd(1), 0.15, target_item=TARGET, seed=2)
    votes = study.votes
    puppet = np.char.startswith(votes.worker_ids.astype(str), "P")
    per_identity = np.bincount(votes.worker, minlength=len(votes.worker_ids))[puppet]
    assert (per_identity == 20).all()
    assert puppet[votes.worker].mean() == pytest.approx(0.15, abs=0.01)
    target = str(study.item_ids[TARGET])
    on_target = (votes.item_ids[votes.item_a] == target) | (votes.item_ids[votes.item_b] == target)
    puppet_votes = puppet[votes.worker]
    # Always favoured: every puppet vote on the target picks it; the others follow the truth.
    assert (votes.item_ids[votes.winner][puppet_votes & on_target] == target).all()
    # Each puppet meets the target a few times only: too few for any test of one identity.
    assert np.bincount(votes.worker[puppet_votes & on_target], minlength=len(puppet)).max() <= 12
    with pytest.raises(ValueError, match="share"):
        add_one_page_identities(_crowd(1), 1.5)


@pytest.mark.parametrize("direction", [1, -1])
def test_puppet_votes_are_set_aside_and_the_target_stays_in_its_honest_interval(direction):
    crowd = _crowd(5000)
    study = add_one_page_identities(crowd, 0.20, target_item=TARGET, collusion_direction=direction, seed=5013)
    votes, target = study.votes, str(study.item_ids[TARGET])
    ids = votes.worker_ids.astype(str)
    puppet, honest = np.char.startswith(ids, "P"), np.char.startswith(ids, "W")
    options = AnalysisOptions(n_boot=100, progress=False)
    honest_only = analyze(votes.subset(honest[votes.worker]), replace(options, bias_test=False,
                                                                      sockpuppet_test=False))
    before = analyze(votes, replace(options, sockpuppet_test=False))
    after = analyze(votes, options)

    def scales(result):
        return {r["set_id"]: r for r in result.scales if r["item_id"] == target}

    reference, bent, fixed = scales(honest_only), scales(before), scales(after)
    outside = [s for s in reference if not reference[s]["ci_low"] <= bent[s]["scale"] <= reference[s]["ci_high"]]
    assert outside, "the puppets should bend the item out of its honest interval without the test"
    # The leave-one-out test cannot see them: no puppet is flagged for a targeted bias.
    assert not any(f.startswith(("favours:", "disfavours:")) for r, p in zip(before.workers, puppet) if p
                   for f in r["flags"].split(";") if r["flags"])
    for s in reference:
        assert reference[s]["ci_low"] <= fixed[s]["scale"] <= reference[s]["ci_high"]
    found = after.summary["sockpuppets"]["coordinated_items"]
    assert [(i["item_id"], i["direction"]) for i in found] == [(target, "favours" if direction > 0 else "disfavours")]
    flag = f"set_aside:{'favours' if direction > 0 else 'disfavours'}:{target}"
    flags = [r["flags"].split(";") for r in after.workers]
    on_target = (votes.item_ids[votes.item_a] == target) | (votes.item_ids[votes.item_b] == target)
    met = np.bincount(votes.worker[on_target], minlength=len(ids)) > 0
    assert all(flag in f for f, m, p in zip(flags, met, puppet) if p and m)
    assert not any(f != [""] for f, h in zip(flags, honest) if h)   # established honest workers: no flag
    assert after.kept[puppet].all()   # down-weighted, not excluded: their other votes count
    assert after.summary["sockpuppets"]["set_aside_votes"] == int((puppet[votes.worker] & on_target).sum())
    assert after.summary["counts"]["votes"] == len(votes)


@pytest.mark.parametrize("method_sd", [0.8, 2.0])
def test_honest_one_page_identities_are_rarely_touched(method_sd):
    """Honest crowds with honest one-page identities (15 % of the votes), 15 studies: at most one item set
    aside, and under 1 % of honest identities marked. method_sd 2 makes items that never lose or never win
    among the established workers, whose honest upsets the exact tails must not take for coordination."""
    studies_with_items = marked = identities = 0
    for seed in range(15):
        study = add_one_page_identities(_crowd(100 + seed, method_sd), 0.15, colluding=False, seed=seed)
        result = coordinated_identities(study.votes, ScalingOptions(), _everyone(study.votes))
        studies_with_items += bool(result.items)
        marked += sum(bool(f) for f in result.flags)
        identities += len(study.votes.worker_ids)
    assert studies_with_items <= 1
    assert marked < 0.01 * identities


def test_nothing_to_test_without_short_lived_or_established_workers():
    crowd = _crowd(3)
    result = coordinated_identities(crowd.votes, ScalingOptions(), _everyone(crowd.votes))
    assert result.reason == "no short-lived identities" and not result.set_aside.any()
    pages = add_one_page_identities(crowd, 0.5, target_item=TARGET, seed=4).votes
    only_pages = pages.subset(np.char.startswith(pages.worker_ids.astype(str), "P")[pages.worker])
    result = coordinated_identities(only_pages, ScalingOptions(), _everyone(only_pages))
    assert result.reason.startswith("no established workers") and not result.set_aside.any()
    with pytest.raises(ValueError, match="alpha"):
        coordinated_identities(crowd.votes, ScalingOptions(), _everyone(crowd.votes), alpha=0.0)
    with pytest.raises(ValueError, match="short_lived_votes"):
        AnalysisOptions(short_lived_votes=0)


def test_cli_flags_summary_and_switch_off(tmp_path):
    study = add_one_page_identities(_crowd(5001), 0.15, target_item=TARGET, seed=7)
    write_votes(tmp_path / "votes.csv", study.votes)
    target = str(study.item_ids[TARGET])
    runner = CliRunner()
    on = runner.invoke(cli, ["analyze", str(tmp_path / "votes.csv"), "--out", str(tmp_path / "on"),
                             "--bootstrap", "0", "--no-plots"])
    assert on.exit_code == 0, on.output
    assert f"sock-puppet test: short-lived identities as a group favours {target}" in on.output
    rows = list(csv.DictReader((tmp_path / "on" / "workers.csv").open()))
    marked = [r for r in rows if f"set_aside:favours:{target}" in r["flags"].split(";")]
    assert marked and all(r["worker_id"].startswith("P") and r["kept"] == "1" for r in marked)
    summary = json.loads((tmp_path / "on" / "summary.json").read_text())
    assert summary["parameters"]["sockpuppet_test"] is True
    assert summary["sockpuppets"]["identities_with_votes_set_aside"] == len(marked)

    off = runner.invoke(cli, ["analyze", str(tmp_path / "votes.csv"), "--out", str(tmp_path / "off"),
                              "--bootstrap", "0", "--no-plots", "--no-sockpuppet-test"])
    assert off.exit_code == 0, off.output
    assert "sock-puppet" not in off.output
    assert not any("set_aside" in r["flags"] for r in csv.DictReader((tmp_path / "off" / "workers.csv").open()))
    summary = json.loads((tmp_path / "off" / "summary.json").read_text())
    assert summary["sockpuppets"] is None and summary["parameters"]["sockpuppet_test"] is False
    bad = runner.invoke(cli, ["analyze", str(tmp_path / "votes.csv"), "--out", str(tmp_path / "bad"),
                              "--short-lived-votes", "0"])
    assert bad.exit_code != 0 and "Traceback" not in bad.output


def _networks(ids: np.ndarray, campus: int = 4) -> np.ndarray:
    """An address group per identity: the puppets share one network; the first ``campus`` honest one-page
    identities share another (a lab or a carrier's NAT); everyone else has a network of their own."""
    groups = np.array([f"net{k}" for k in range(len(ids))], dtype=object)
    groups[np.char.startswith(ids, "P")] = "puppeteer"
    groups[np.flatnonzero(np.char.startswith(ids, "H"))[:campus]] = "campus"
    return groups.astype(str)


def test_shared_fingerprints_catch_a_weak_lean_the_pooled_test_misses():
    """Puppets (10 % of the votes) lean 1 z toward m003 among honest one-page identities (15 %); 10 seeded
    studies. Pooled with every short-lived identity the lean is diluted; the puppets' shared address group
    tests them apart, and the campus of honest one-pagers sharing another group is left alone."""
    pooled = grouped = 0
    for seed in range(10):
        study = add_one_page_identities(_crowd(seed), 0.15, colluding=False, seed=seed + 7)
        study = add_one_page_identities(study, 0.10, target_item=TARGET, collusion_bias=1.0, seed=seed + 13)
        votes, target = study.votes, str(study.item_ids[TARGET])
        ids = votes.worker_ids.astype(str)
        networks = _networks(ids)
        without = coordinated_identities(votes, ScalingOptions(), _everyone(votes))
        with_groups = coordinated_identities(votes, ScalingOptions(), _everyone(votes),
                                             fingerprints={"address_group": networks})
        pooled += (target, "favours") in [(i["item_id"], i["direction"]) for i in without.items]
        found = [(i["item_id"], i["direction"], i.get("evidence")) for i in with_groups.items]
        grouped += (target, "favours", "address_group") in found
        campus = networks == "campus"
        assert not any(with_groups.flags[w] for w in np.flatnonzero(campus)), found
        assert all(i["identities"] == int((networks == "puppeteer").sum()) for i in with_groups.items
                   if i.get("evidence"))
    assert pooled <= 6 and grouped >= 8, (pooled, grouped)


def test_a_shared_fingerprint_alone_sets_nothing_aside():
    """Honest one-page identities that all share one network and one browser (a lab session): the groups are
    tested, nothing leans, nothing is set aside."""
    study = add_one_page_identities(_crowd(21), 0.20, colluding=False, seed=22)
    votes = study.votes
    ids = votes.worker_ids.astype(str)
    shared = np.where(np.char.startswith(ids, "H"), "lab", "")
    result = coordinated_identities(votes, ScalingOptions(), _everyone(votes),
                                    fingerprints={"address_group": shared, "agent_group": shared})
    assert result.short_lived.sum() >= 10 and not result.items and not result.set_aside.any()
    with pytest.raises(ValueError, match="fingerprint"):
        coordinated_identities(votes, ScalingOptions(), _everyone(votes), fingerprints={"address_group": ["x"]})


def test_analyze_reads_the_fingerprints_of_workers_csv(tmp_path):
    """`perceptlab analyze --workers workers.csv` passes its address_group to the test (the export's columns)."""
    study = add_one_page_identities(_crowd(2), 0.15, colluding=False, seed=9)
    study = add_one_page_identities(study, 0.10, target_item=TARGET, collusion_bias=1.0, seed=15)
    votes = study.votes
    ids = votes.worker_ids.astype(str)
    write_votes(tmp_path / "votes.csv", votes)
    with open(tmp_path / "workers.csv", "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["worker_id", "status", "address_group", "agent_group"])
        writer.writerows([w, "active", group, ""] for w, group in zip(ids, _networks(ids)))
    runner = CliRunner()
    plain = runner.invoke(cli, ["analyze", str(tmp_path / "votes.csv"), "--out", str(tmp_path / "plain"),
                                "--bootstrap", "0", "--no-plots"])
    grouped = runner.invoke(cli, ["analyze", str(tmp_path / "votes.csv"), "--out", str(tmp_path / "grouped"),
                                  "--bootstrap", "0", "--no-plots", "--workers", str(tmp_path / "workers.csv")])
    assert plain.exit_code == 0 and grouped.exit_code == 0, (plain.output, grouped.output)
    summary = json.loads((tmp_path / "grouped" / "summary.json").read_text())["sockpuppets"]
    evidence = [(i["item_id"], i.get("evidence")) for i in summary["coordinated_items"]]
    assert (str(study.item_ids[TARGET]), "address_group") in evidence
    assert "sharing an address_group" in grouped.output
    plain_items = json.loads((tmp_path / "plain" / "summary.json").read_text())["sockpuppets"]["coordinated_items"]
    assert not any(i.get("evidence") for i in plain_items)
