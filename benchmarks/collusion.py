"""Colluding workers against the targeted-bias test of ``perceptlab analyze`` (analysis/collusion.py).

Simulated studies in which a share of the workers answer like honest Thurstone observers except on
pairs holding one item (the same method in every scene), which they see shifted by a bias (z units;
``inf``: they always, or never, pick it). For each colluder share x bias x direction, over --seeds
studies:

* shift without / with: mean over sets of |scale of the target item - its honest-only scale|
  (anchored units, 0-1), analysed without the test and with it (the default);
* inside CI without / with: share of (study, set) where the target's scale lies inside the 95 %
  interval of the honest-only analysis (target: 100 % with the test);
* colluders caught, honest flagged: shares of colluders and of honest workers flagged
  (target: honest flagged at most 2 %).

The last rows replay the scenario of issue 29: 3 of 20 workers answer like a machine observer (the
image closer to the reference) except that they always choose one method. ``--large`` adds a
StudyMB-sized study (8 sets x 155 items, 300 workers, 25 % random clickers): there each worker meets
an item about 3 times, too few for any per-worker test, and the table shows what that costs.

The last table is benchmarks/sockpuppets.py's: the same colluding votes spread over one-page
identities, before and after the sock-puppet test (``--only-sockpuppets`` runs it alone; with
``--large``, on the StudyMB-sized crowd).

Run: .venv/bin/python benchmarks/collusion.py [--seeds 5] [--workers 20] [--large] [--sockpuppet-seeds 20]
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from analysis.collusion import targeted_bias  # noqa: E402
from analysis.pipeline import AnalysisOptions, analyze  # noqa: E402
from analysis.scaling import ScalingOptions  # noqa: E402
from analysis.simulate import simulate_study  # noqa: E402
from benchmarks import sockpuppets  # noqa: E402
from benchmarks._common import print_table, timer  # noqa: E402

SHARES = (0.10, 0.15, 0.20)
BIASES = (0.5, 1.0, 2.0, np.inf)
N_BOOT = 200


def target_scales(result, item: str) -> dict[str, tuple[float, float, float]]:
    """set_id -> (scale, ci_low, ci_high) of ``item``."""
    return {r["set_id"]: (r["scale"], r["ci_low"], r["ci_high"]) for r in result.scales if r["item_id"] == item}


def one_study(share: float, bias: float, direction: int, seed: int, n_workers: int, style: str = "honest",
              machine: bool = False, large: bool = False) -> dict:
    size = (dict(random_clickers=0.25, left_clickers=0.0) if large else
            dict(n_sets=4, n_items=8, degree=7, votes_per_pair=n_workers, n_workers=n_workers, random_clickers=0.0,
                 left_clickers=0.0))
    study = simulate_study(**size, colluders=share, collusion_bias=bias, collusion_direction=direction,
                           target_item=3, colluder_style=style, seed=seed)
    votes, target = study.votes, str(study.item_ids[3])
    lookup = dict(zip(study.worker_ids, study.worker_type))
    kind = np.array([lookup[w] for w in votes.worker_ids])
    colluder = np.isin(kind, ["favour", "disfavour"])
    honest = kind == "honest"
    options = dict(n_boot=N_BOOT, progress=False, seed=seed)
    errors = study.errors if machine else None
    honest_only = analyze(votes.subset(honest[votes.worker]), AnalysisOptions(bias_test=False, **options))
    without = analyze(votes, AnalysisOptions(bias_test=False, **options))
    with_test = analyze(votes, AnalysisOptions(**options), machine_errors=errors)
    reference = target_scales(honest_only, target)
    out = {"shift": {}, "inside": {}}
    for name, result in (("without", without), ("with", with_test)):
        got = target_scales(result, target)
        out["shift"][name] = [abs(got[s][0] - reference[s][0]) for s in reference]
        out["inside"][name] = [reference[s][1] <= got[s][0] <= reference[s][2] for s in reference]
    flagged = np.array([bool(r["flags"]) and ("favours:" in r["flags"]) for r in with_test.workers])
    out["caught"], out["n_colluders"] = int((flagged & colluder).sum()), int(colluder.sum())
    out["honest_flagged"], out["n_honest"] = int((flagged & honest).sum()), int(honest.sum())
    out["target_mean"] = {name: float(np.mean([v[0] for v in target_scales(r, target).values()]))
                          for name, r in (("honest", honest_only), ("without", without), ("with", with_test))}
    out["machine_flagged"] = (int(sum("machine_agreement" in r["flags"] for r in with_test.workers))
                              if machine else None)
    with timer() as t:
        targeted_bias(votes, ScalingOptions(), with_test.screening.kept)
    out["test_seconds"] = t["seconds"]
    return out


def row(label: list[str], runs: list[dict]) -> list:
    pooled = {k: [x for r in runs for x in r["shift"][k]] for k in ("without", "with")}
    inside = {k: [x for r in runs for x in r["inside"][k]] for k in ("without", "with")}
    caught = sum(r["caught"] for r in runs) / max(sum(r["n_colluders"] for r in runs), 1)
    honest = sum(r["honest_flagged"] for r in runs) / max(sum(r["n_honest"] for r in runs), 1)
    return label + [f"{np.mean(pooled['without']):.3f}", f"{np.mean(pooled['with']):.3f}",
                    f"{np.mean(inside['without']):.0%}", f"{np.mean(inside['with']):.0%}",
                    f"{caught:.0%}", f"{honest:.1%}"]


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, default=5, help="simulated studies per setting")
    parser.add_argument("--workers", type=int, default=20, help="workers per study (each answers every pair)")
    parser.add_argument("--large", action="store_true", help="also one StudyMB-sized study per colluder share")
    parser.add_argument("--sockpuppet-seeds", type=int, default=20,
                        help="studies per row of the sock-puppet scenario (benchmarks/sockpuppets.py; 0: skip it)")
    parser.add_argument("--only-sockpuppets", action="store_true", help="run only the sock-puppet scenario")
    args = parser.parse_args(argv)
    if args.only_sockpuppets:
        sockpuppets.run(args.sockpuppet_seeds, args.large)
        return
    print(f"{args.workers} workers, 4 sets x 8 items, every worker answers all 28 pairs of every set; "
          f"{args.seeds} studies per row; {N_BOOT} worker bootstraps; target item m003\n", flush=True)
    rows = []
    with timer() as t:
        for direction in (1, -1):
            for share in SHARES:
                for bias in BIASES:
                    runs = [one_study(share, bias, direction, 1000 + seed, args.workers) for seed in range(args.seeds)]
                    rows.append(row(["favour" if direction > 0 else "disfavour", f"{share:.0%}",
                                     "always" if np.isinf(bias) else f"{bias:g} z"], runs))
                    print("  " + "  ".join(rows[-1]), flush=True)
    print()
    print_table(["colluders", "share", "bias", "shift without", "shift with", "inside CI without", "inside CI with",
                 "colluders caught", "honest flagged"], rows)
    print(f"\n({t['seconds']:.0f} s)\n")

    print("Issue 29's scenario: 3 of 20 workers answer like a machine observer but always choose one method")
    runs = [one_study(0.15, np.inf, 1, 2000 + seed, 20, style="machine", machine=True) for seed in range(args.seeds)]
    print_table(["study", "target mean: honest-only", "without test", "with test", "colluders caught",
                 "honest flagged", "machine_agreement flags"],
                [[str(k), f"{r['target_mean']['honest']:.3f}", f"{r['target_mean']['without']:.3f}",
                  f"{r['target_mean']['with']:.3f}", f"{r['caught']}/{r['n_colluders']}",
                  f"{r['honest_flagged']}/{r['n_honest']}", str(r["machine_flagged"])] for k, r in enumerate(runs)])
    if args.large:
        print("\nStudyMB-sized study (8 sets x 155 items, 300 workers, 25 % random clickers), colluders always "
              "favour m003; one study per row")
        runs = [one_study(share, np.inf, 1, 3000, 300, large=True) for share in SHARES]
        print_table(["colluders", "share", "bias", "shift without", "shift with", "inside CI without",
                     "inside CI with", "colluders caught", "honest flagged", "test seconds"],
                    [row(["favour", f"{share:.0%}", "always"], [r]) + [f"{r['test_seconds']:.2f}"]
                     for share, r in zip(SHARES, runs)])
    if args.sockpuppet_seeds:
        print("\n")
        sockpuppets.run(args.sockpuppet_seeds)


if __name__ == "__main__":
    main()
