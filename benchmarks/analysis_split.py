"""Where `perceptlab analyze`'s time goes: imports, numerics, plots (target: imports + plots <= 1/4).

A StudyMB-sized study (8 sets x 141 items, degree 6, 20 votes per pair: 67,680 votes; 25 % random and
5 % left clickers) is simulated once. Each run then does what `perceptlab analyze VOTES --out DIR` does, in
a fresh interpreter, timing its stages:

imports
    the CLI's modules and the analysis modules the command imports, and matplotlib (imported by the first
    plot; timed on its own here);
numerics
    reading votes.csv, screening, scaling, 1,000 worker bootstraps, writing the tables;
plots
    drawing and saving scales, worker_tpr and win_proportions (PNG at 200 dpi and PDF each);
start/exit
    the rest of the process: the interpreter's start (~0.03 s) and its exit, whose last garbage collection
    walks every object the modules made (0.2-0.3 s CPU). Neither imports nor plots, so not in the target.

Wall and CPU seconds are given (CPU: the process's user + system time, less disturbed by other jobs on a
shared machine than wall time). `--root DIR` runs another checkout's code (e.g. the main branch) for a
before/after comparison; `--profile` writes a pyinstrument profile of one run of the real command.

Run: .venv/bin/python benchmarks/analysis_split.py [--repeat 3] [--bootstrap 1000] [--root DIR]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from benchmarks._common import print_table  # noqa: E402

TARGET_SHARE = 0.25

# One analysis in a fresh interpreter; prints one JSON line of stage timings (wall and CPU).
CHILD = r"""
import json, sys, time
clock = lambda: (time.perf_counter(), time.process_time())
start = clock()
from server.cli import cli                                    # what every perceptlab command imports
from analysis.formats import read_votes                       # what `analyze` imports when it runs
from analysis.pipeline import AnalysisOptions, analyze, write_results, _write_plots
imported = clock()
votes_csv, out, n_boot = sys.argv[1], sys.argv[2], int(sys.argv[3])
votes = read_votes(votes_csv)
result = analyze(votes, AnalysisOptions(n_boot=n_boot, seed=0, progress=False))
write_results(result, out, plots=False)
computed = clock()
import matplotlib                                              # imported by the first plot in a real run
matplotlib.use("Agg")
import matplotlib.pyplot
plotting_imported = clock()
from pathlib import Path
_write_plots(result, Path(out))
plotted = clock()
span = lambda a, b: [b[0] - a[0], b[1] - a[1]]
print(json.dumps({"imports": span(start, imported), "numerics": span(imported, computed),
                  "plot_imports": span(computed, plotting_imported), "plots": span(plotting_imported, plotted),
                  "script": span(start, plotted)}))
"""


def simulate_votes(folder: Path, sets: int, items: int, seed: int) -> tuple[Path, int]:
    """Write the simulated study's votes.csv into ``folder``; return its path and the number of votes."""
    from analysis.simulate import simulate_study, write_study

    study = simulate_study(n_sets=sets, n_items=items, degree=6, votes_per_pair=20, seed=seed)
    return write_study(study, folder)["votes"], len(study.votes)


def run_once(code_root: Path, votes_csv: Path, out: Path, n_boot: int) -> dict:
    """One analysis in a fresh interpreter: stage timings, plus the interpreter's start-up (wall and CPU)."""
    env = dict(os.environ, PYTHONPATH=str(code_root))
    started, cpu_before = time.perf_counter(), os.times()
    completed = subprocess.run([sys.executable, "-c", CHILD, str(votes_csv), str(out), str(n_boot)], env=env,
                               cwd=code_root, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - started
    cpu_after = os.times()
    cpu = (cpu_after.children_user - cpu_before.children_user) + (cpu_after.children_system
                                                                  - cpu_before.children_system)
    if completed.returncode != 0:
        raise RuntimeError(f"analysis failed:\n{completed.stderr}")
    t = json.loads(completed.stdout.strip().splitlines()[-1])
    startup = [wall - t["script"][0], cpu - t["script"][1]]    # interpreter start and exit, outside the script
    imports = [t["imports"][k] + t["plot_imports"][k] for k in (0, 1)]
    return {"imports": imports, "numerics": t["numerics"], "plots": t["plots"], "total": [wall, cpu],
            "startup": startup, "matplotlib": t["plot_imports"]}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sets", type=int, default=8)
    parser.add_argument("--items", type=int, default=141, help="items per set")
    parser.add_argument("--bootstrap", type=int, default=1000, help="bootstrap resamples")
    parser.add_argument("--repeat", type=int, default=3, help="runs (the median of each stage is shown)")
    parser.add_argument("--root", type=Path, default=ROOT, help="checkout whose code to run (default: this one)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--profile", type=Path, help="also write a pyinstrument text profile of the real "
                                                     "`python -m server.cli analyze` to this file")
    args = parser.parse_args(argv)
    root = args.root.resolve()

    with tempfile.TemporaryDirectory(prefix="perceptlab-analysis-split-") as work:
        work = Path(work)
        votes_csv, n_votes = simulate_votes(work / "study", args.sets, args.items, args.seed)
        print(f"# {args.sets} sets x {args.items} items, {n_votes} votes, {args.bootstrap} bootstraps; code: {root}; "
              f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f}", flush=True)
        runs = []
        for run in range(args.repeat):
            timings = run_once(root, votes_csv, work / f"out-{run}", args.bootstrap)
            runs.append(timings)
            print(f"  run {run + 1}: " + ", ".join(f"{k} {v[0]:.2f} s ({v[1]:.2f} CPU)" for k, v in timings.items()
                                                   if k in ("imports", "numerics", "plots", "total")), flush=True)
        if args.profile:
            env = dict(os.environ, PYTHONPATH=str(root))
            subprocess.run([sys.executable, "-m", "pyinstrument", "-o", str(args.profile), "-m", "server.cli",
                            "analyze", str(votes_csv), "--out", str(work / "profiled"), "--bootstrap",
                            str(args.bootstrap)], env=env, cwd=root, check=True, stdout=subprocess.DEVNULL)
            print(f"profile: {args.profile}")

    rows = []
    for kind, index in (("wall", 0), ("CPU", 1)):
        stage = {k: statistics.median(r[k][index] for r in runs) for k in ("imports", "numerics", "plots", "total",
                                                                            "matplotlib", "startup")}
        share = (stage["imports"] + stage["plots"]) / stage["total"]
        rows.append([kind, f"{stage['imports']:.2f}", f"{stage['matplotlib']:.2f}", f"{stage['numerics']:.2f}",
                     f"{stage['plots']:.2f}", f"{stage['startup']:.2f}", f"{stage['total']:.2f}",
                     f"{100 * share:.1f}%"])
    print()
    print_table(["seconds", "imports", "of which matplotlib", "numerics", "plots", "start/exit", "total",
                 "(imports+plots)/total"], rows)
    cpu_share = float(rows[1][-1].rstrip("%")) / 100
    verdict = "met" if cpu_share <= TARGET_SHARE else "NOT met"
    print(f"\ntarget: imports + plots <= {TARGET_SHARE:.0%} of the total (CPU seconds): {cpu_share:.1%}, {verdict}")


if __name__ == "__main__":
    main()
