"""Sock puppets: the same colluding votes spread over one-page identities (analysis/sockpuppets.py).

The honest crowd is benchmarks/collusion.py's (20 workers answering all 28 pairs of 4 sets x 8
items) or, with ``--large``, a StudyMB-sized study (300 workers, 8 sets x 155 items, 25 % random
clickers). Puppets add 10-20 % of the votes in identities of one page (20 pairs drawn from all the
study's pairs), each seeing the target item m003 shifted by the bias (``always``: always, or never,
picking it; ``--large`` runs the "always favour" rows only). ``+ honest one-pagers`` also adds honest
one-page identities (10 % of the votes), so that the group the test judges is not made of puppets
alone.

The last two rows lean only 1 z toward m003 among honest one-page identities (15 % of the votes), first
without, then with entry fingerprints: the puppets entered from one network (workers.csv's
``address_group``, server/fingerprints.py), and four honest one-pagers share another (a lab). The shared
group is tested apart from the pooled short-lived identities (analysis/sockpuppets.py). Measured
(``--fingerprints --seeds 10``, load average 16 on 2 cores, 96 s): puppets that met the target caught
45/150, 143/239, 295/328 (10, 15, 20 % of the votes) without the fingerprints, 150/150, 215/239, 328/328
with them; honest one-pagers that met the target with votes set aside 60, 120, 180 of 199 without, 0 of 199
with; the target's shift 0.009/0.008/0.007 without, 0.002/0.003/0.002 with (inside its honest interval in
100 % of sets either way; 88-100 % with no test); honest workers flagged 0/400.

Per row, over the studies: the target's shift from its honest-only scale (anchored units) and the
share of sets where it lies inside the honest-only 95 % interval, before (the default analysis
without the sock-puppet test: screening and the leave-one-out targeted-bias test) and after (the
default analysis); puppets caught (puppets that met the target whose votes on it were set aside);
honest workers flagged (a targeted-bias flag, which excludes them; screening's own exclusions are not
counted); the share of honest
one-page identities that met the target whose votes on it were set aside (a down-weighting, not a
verdict); and the test's time.

Run: .venv/bin/python benchmarks/sockpuppets.py [--seeds 20] [--large] [--fingerprints]
     (also run by benchmarks/collusion.py)
     .venv/bin/python benchmarks/sockpuppets.py --cost 20000   (the test's time at 20,000 items, 1.2 M votes)
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from analysis.pipeline import AnalysisOptions, analyze  # noqa: E402
from analysis.scaling import ScalingOptions  # noqa: E402
from analysis.simulate import add_one_page_identities, simulate_study  # noqa: E402
from analysis.sockpuppets import coordinated_identities  # noqa: E402
from benchmarks._common import print_table, timer  # noqa: E402

SHARES = (0.10, 0.15, 0.20)
N_BOOT = 200
TARGET = 3


def target_scales(result, item: str) -> dict[str, tuple[float, float, float]]:
    """set_id -> (scale, ci_low, ci_high) of ``item``."""
    return {r["set_id"]: (r["scale"], r["ci_low"], r["ci_high"]) for r in result.scales if r["item_id"] == item}


def networks(ids: np.ndarray) -> dict[str, dict[str, str]]:
    """workers.csv's address_group of a simulated study: the puppets entered from one network (one operator);
    the first 4 honest one-page identities share another (a lab); everyone else has their own."""
    groups = {w: f"net{k}" for k, w in enumerate(ids)}
    groups.update({w: "puppeteer" for w in ids if w.startswith("P")})
    groups.update({w: "lab" for w in [w for w in ids if w.startswith("H")][:4]})
    return {"address_group": groups}


def one_study(share: float, bias: float, direction: int, seed: int, large: bool, honest_pages: float,
              shared_network: bool = False) -> dict:
    size = (dict(random_clickers=0.25, left_clickers=0.0) if large else
            dict(n_sets=4, n_items=8, degree=7, votes_per_pair=20, n_workers=20, random_clickers=0.0,
                 left_clickers=0.0))
    study = simulate_study(**size, seed=seed)
    if honest_pages:
        study = add_one_page_identities(study, honest_pages, colluding=False, seed=seed + 7)
    honest_ids = set(study.worker_ids[study.worker_type == "honest"])
    study = add_one_page_identities(study, share, target_item=TARGET, collusion_bias=bias,
                                    collusion_direction=direction, seed=seed + 13)
    votes, target = study.votes, str(study.item_ids[TARGET])
    kind = dict(zip(study.worker_ids, study.worker_type))
    ids = votes.worker_ids.astype(str)
    puppet = np.array([w.startswith("P") for w in ids])
    honest = np.array([w in honest_ids for w in ids])
    one_page_honest = np.array([w.startswith("H") for w in ids])
    assert all(kind[w] in ("favour", "disfavour") for w in ids[puppet])
    is_target = (votes.item_ids[votes.item_a] == target) | (votes.item_ids[votes.item_b] == target)
    met = np.bincount(votes.worker[is_target & ~votes.is_gold], minlength=len(ids)) > 0
    options = dict(n_boot=N_BOOT, progress=False, seed=seed)
    reference = target_scales(analyze(votes.subset(honest[votes.worker]),
                                      AnalysisOptions(bias_test=False, sockpuppet_test=False, **options)), target)
    before = analyze(votes, AnalysisOptions(sockpuppet_test=False, **options))
    after = analyze(votes, AnalysisOptions(**options), fingerprints=networks(ids) if shared_network else None)
    out = {"shift": {}, "inside": {}}
    for name, result in (("before", before), ("after", after)):
        got = target_scales(result, target)
        out["shift"][name] = [abs(got[s][0] - reference[s][0]) for s in reference]
        out["inside"][name] = [reference[s][1] <= got[s][0] <= reference[s][2] for s in reference]
    set_aside = np.array([any(f.startswith("set_aside:") and f.endswith(":" + target) for f in r["flags"].split(";"))
                          for r in after.workers])
    # A verdict: a targeted-bias flag (which excludes); set_aside: flags only say where votes went.
    verdict = np.array([any(f.startswith(("favours:", "disfavours:")) for f in r["flags"].split(";"))
                        for r in after.workers])
    out["caught"], out["n_puppets"] = int((set_aside & puppet & met).sum()), int((puppet & met).sum())
    out["before_caught"] = int(sum(bool(r["flags"]) and "favours:" in r["flags"] for r, p in zip(before.workers, puppet)
                                   if p))
    out["honest_flagged"], out["n_honest"] = int((verdict & honest).sum()), int(honest.sum())
    out["pages_set_aside"] = int((set_aside & one_page_honest & met).sum())
    out["n_pages"] = int((one_page_honest & met).sum())
    with timer() as t:
        coordinated_identities(votes, ScalingOptions(), after.screening.kept)
    out["seconds"] = t["seconds"]
    return out


def row(label: list[str], runs: list[dict]) -> list:
    shift = {k: np.mean([x for r in runs for x in r["shift"][k]]) for k in ("before", "after")}
    inside = {k: np.mean([x for r in runs for x in r["inside"][k]]) for k in ("before", "after")}
    total = lambda key: sum(r[key] for r in runs)  # noqa: E731
    pages = f"{total('pages_set_aside')}/{total('n_pages')}" if total("n_pages") else "-"
    return label + [f"{shift['before']:.3f}", f"{shift['after']:.3f}", f"{inside['before']:.0%}",
                    f"{inside['after']:.0%}", f"{total('before_caught')}", f"{total('caught')}/{total('n_puppets')}",
                    f"{total('honest_flagged')}/{total('n_honest')}", pages,
                    f"{np.mean([r['seconds'] for r in runs]):.2f}"]


HEADER = ["puppets", "votes", "bias", "honest crowd", "shift before", "shift after", "inside CI before",
          "inside CI after", "caught before", "caught after", "honest flagged", "one-pagers set aside", "test s"]


def run(seeds: int, large: bool = False, fingerprints_only: bool = False) -> list[list]:
    """Print and return the table's rows."""
    crowd = "StudyMB-sized (300 workers, 8 x 155 items, 25 % random)" if large else "20 workers, 4 x 8 items"
    print(f"Sock puppets: one-page identities (20 votes each) carrying 10-20 % of the votes favour or disfavour "
          f"m003; honest crowd {crowd}; {seeds} studies per row; {N_BOOT} worker bootstraps\n", flush=True)
    settings = [(1, np.inf, 0.0, False), (-1, np.inf, 0.0, False), (1, 2.0, 0.0, False), (1, np.inf, 0.10, False),
                (1, 1.0, 0.15, False), (1, 1.0, 0.15, True)]
    if large:  # about 2 minutes a study: the "always favour" rows only
        settings = settings[:1]
    if fingerprints_only:
        settings = settings[-2:]
    rows = []
    with timer() as t:
        for direction, bias, pages, shared in settings:
            for share in SHARES:
                runs = [one_study(share, bias, direction, 5000 + seed, large, pages, shared) for seed in range(seeds)]
                rows.append(row(["favour" if direction > 0 else "disfavour", f"{share:.0%}",
                                 "always" if np.isinf(bias) else f"{bias:g} z",
                                 ("+ honest one-pagers" if pages else "established")
                                 + (", puppets share a network" if shared else "")], runs))
                print("  " + "  ".join(rows[-1]), flush=True)
    print()
    print_table(HEADER, rows)
    print(f"\n({t['seconds']:.0f} s)")
    return rows


def cost(n_items: int = 20_000, share: float = 0.10) -> None:
    """Time the test on benchmarks/scaling.py's largest study (one set, 6-regular design, 20 votes per
    pair: 1.2 M votes at 20,000 items) with ``share`` of the votes added by one-page puppets, against
    one fit of the set."""
    from analysis.formats import build_votes
    from analysis.scaling import fit_set, set_designs
    from analysis.simulate import SimulatedStudy
    from benchmarks.scaling import make_votes

    truth, a, b, a_won, workers = make_votes(n_items)
    item_ids = np.array([f"m{k:05d}" for k in range(n_items)])
    worker_ids = np.array([f"W{k:05d}" for k in range(workers.max() + 1)])
    votes = build_votes(worker_ids[workers], np.full(len(a), "set01"), item_ids[a], item_ids[b],
                        item_ids[np.where(a_won, a, b)], extra={"position_a": np.full(len(a), "left")})
    study = SimulatedStudy(votes, {"set01": truth}, item_ids, worker_ids, np.full(len(worker_ids), "honest"))
    study = add_one_page_identities(study, share, target_item=TARGET, seed=1)
    votes = study.votes
    kept = np.ones(len(votes.worker_ids), dtype=bool)
    designs = set_designs(votes)
    with timer() as fit:
        fit_set(designs[0], ScalingOptions(anchors=False))
    with timer() as t:
        result = coordinated_identities(votes, ScalingOptions(), kept, designs=designs)
    print(f"{n_items} items, {len(votes):,} votes ({share:.0%} from {int(result.short_lived.sum())} one-page "
          f"identities): sock-puppet test {t['seconds']:.2f} s (one fit of the set: {fit['seconds']:.2f} s); "
          f"coordinated: {[(i['item_id'], i['direction'], round(i['z'], 1)) for i in result.items]}, "
          f"{int(result.set_aside.sum())} votes set aside")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, default=20, help="simulated studies per row")
    parser.add_argument("--large", action="store_true", help="the StudyMB-sized crowd instead of the small one")
    parser.add_argument("--cost", type=int, metavar="ITEMS",
                        help="only time the test on a one-set study of ITEMS items (20000: 1.2 M votes)")
    parser.add_argument("--fingerprints", action="store_true",
                        help="only the rows of a weak (1 z) lean, without and with the puppets' shared address group")
    args = parser.parse_args(argv)
    if args.cost:
        cost(args.cost)
    else:
        run(args.seeds, args.large, args.fingerprints)


if __name__ == "__main__":
    main()
