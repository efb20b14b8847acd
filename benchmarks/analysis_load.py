"""`perceptlab analyze` on a busy machine: BLAS threads left alone vs limited.

A StudyMB-sized study (8 sets x 141 items, degree 6, 20 votes per pair: 67,680
votes; 25 % random and 5 % left clickers) is simulated once and written to a
votes.csv. Each configuration then analyses it as `perceptlab analyze --no-plots`
does (read, screen, scale, 1,000 worker bootstraps, write the tables) in a fresh
Python process, because OpenBLAS reads its thread count when numpy is imported,
while other processes keep cores busy (`python -c 'while True: pass'`; one by
default).

Configurations
--------------
default
    No thread settings in the environment: what a user gets. The analysis
    package limits BLAS to one thread itself (analysis/threads.py).
OPENBLAS_NUM_THREADS=1
    The limit forced from outside, for OpenBLAS as a whole: the figure the
    default has to match.
no limit (before)
    PERCEPTLAB_BLAS_THREADS=0 switches the package's limit off: OpenBLAS uses
    one thread per core, as before the fix.

Run: .venv/bin/python benchmarks/analysis_load.py [--repeat 3] [--busy 1] [--bootstrap 1000]
     [--sets 8 --items 141] [--skip-before]
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

TARGET_SECONDS = 10.0
THREAD_VARIABLES = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "PERCEPTLAB_BLAS_THREADS")

# Runs in a fresh interpreter per configuration; prints one JSON line of stage timings.
CHILD = r"""
import json, sys, time
started = time.perf_counter()
from analysis.formats import read_votes
from analysis.pipeline import AnalysisOptions, analyze, write_results
from analysis.threads import limited_blas_threads
from threadpoolctl import threadpool_info

votes_csv, out, n_boot, seed = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
imported = time.perf_counter()
with limited_blas_threads():
    threads = max((p["num_threads"] for p in threadpool_info() if p["user_api"] == "blas"), default=0)
votes = read_votes(votes_csv)
read = time.perf_counter()
cpu = time.process_time()
result = analyze(votes, AnalysisOptions(n_boot=n_boot, seed=seed, progress=False))
analysed = time.perf_counter()
cpu = time.process_time() - cpu
write_results(result, out, plots=False)
written = time.perf_counter()
print(json.dumps({"import": imported - started, "read": read - imported, "analyze": analysed - read,
                  "write": written - analysed, "analyze_cpu": cpu, "blas_threads": threads}))
"""

CONFIGURATIONS = {
    "default": {},
    "OPENBLAS_NUM_THREADS=1": {"OPENBLAS_NUM_THREADS": "1"},
    "no limit (before)": {"PERCEPTLAB_BLAS_THREADS": "0"},
}


def simulate_votes(folder: Path, sets: int, items: int, seed: int) -> tuple[Path, int]:
    """Write the simulated study's votes.csv into ``folder``; return its path and the number of votes."""
    from analysis.simulate import simulate_study, write_study

    study = simulate_study(n_sets=sets, n_items=items, degree=6, votes_per_pair=20, seed=seed)
    return write_study(study, folder)["votes"], len(study.votes)


def run_configuration(votes_csv: Path, out: Path, extra_env: dict[str, str], n_boot: int, seed: int) -> dict:
    """One analysis in a fresh interpreter; the stage timings plus the wall time of the whole process."""
    env = {k: v for k, v in os.environ.items() if k not in THREAD_VARIABLES}
    env.update(extra_env)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    started = time.perf_counter()
    completed = subprocess.run([sys.executable, "-c", CHILD, str(votes_csv), str(out), str(n_boot), str(seed)],
                               env=env, cwd=ROOT, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - started
    if completed.returncode != 0:
        raise RuntimeError(f"analysis failed ({extra_env}):\n{completed.stderr}")
    timings = json.loads(completed.stdout.strip().splitlines()[-1])
    timings["wall"] = wall
    return timings


def start_busy_processes(count: int) -> list[subprocess.Popen]:
    """Processes that each keep one core busy until killed."""
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(count)]


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sets", type=int, default=8)
    parser.add_argument("--items", type=int, default=141, help="items per set")
    parser.add_argument("--bootstrap", type=int, default=1000, help="bootstrap resamples")
    parser.add_argument("--repeat", type=int, default=3, help="runs per configuration (the median is shown)")
    parser.add_argument("--busy", type=int, default=1, help="processes keeping a core busy (0: idle machine)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--skip-before", action="store_true", help="leave out the run without the limit")
    args = parser.parse_args(argv)
    configurations = {k: v for k, v in CONFIGURATIONS.items() if not (args.skip_before and k.startswith("no limit"))}

    with tempfile.TemporaryDirectory(prefix="perceptlab-analysis-load-") as work:
        work = Path(work)
        votes_csv, n_votes = simulate_votes(work / "study", args.sets, args.items, args.seed)
        print(f"# {args.sets} sets x {args.items} items, {n_votes} votes, {args.bootstrap} bootstraps; "
              f"{args.busy} busy process(es) on {os.cpu_count()} cores; load average before: "
              f"{os.getloadavg()[0]:.2f}", flush=True)
        busy = start_busy_processes(args.busy)
        results: dict[str, list[dict]] = {name: [] for name in configurations}
        try:
            time.sleep(0.5)  # let the busy processes get going
            for run in range(args.repeat):  # interleaved, so a change in the machine's load hits every configuration
                for name, env in configurations.items():
                    timings = run_configuration(votes_csv, work / f"out-{run}", env, args.bootstrap, args.seed)
                    results[name].append(timings)
                    print(f"  run {run + 1}: {name}: analyze {timings['analyze']:.2f} s "
                          f"({timings['analyze_cpu']:.2f} s CPU), "
                          f"whole run {timings['wall']:.2f} s (BLAS threads {timings['blas_threads']})",
                          flush=True)
        finally:
            for process in busy:
                process.kill()
                process.wait()

    rows = []
    for name, runs in results.items():
        analyse = statistics.median(r["analyze"] for r in runs)
        wall = statistics.median(r["wall"] for r in runs)
        other = statistics.median(r["import"] + r["read"] + r["write"] for r in runs)
        cpu = statistics.median(r["analyze_cpu"] for r in runs)
        rows.append([name, runs[0]["blas_threads"], f"{analyse:.2f}",
                     f"{min(r['analyze'] for r in runs):.2f}-{max(r['analyze'] for r in runs):.2f}",
                     f"{cpu:.2f}", f"{other:.2f}", f"{wall:.2f}"])
    print()
    # CPU seconds (all threads of the process) barely depend on what else runs, unless BLAS threads spin.
    print_table(["configuration", "BLAS threads", "analyze s (median)", "analyze range", "analyze CPU s",
                 "import+read+write s", "whole run s"], rows)
    default = statistics.median(r["wall"] for r in results["default"])
    verdict = "met" if default < TARGET_SECONDS else "NOT met"
    print(f"\ntarget: the whole run < {TARGET_SECONDS:.0f} s with default settings and "
          f"{args.busy} busy process(es): {default:.2f} s, {verdict}")


if __name__ == "__main__":
    main()
