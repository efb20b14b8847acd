"""Benchmark: can a script tell gold trials from real ones by what it downloads?

For two studies prepared with ``stimuli prepare`` defaults,

* the demo (``stimuli build-demo``: 4 scenes x 11 interpolation methods, 320 x 240), and
* a generated image-quality study (:mod:`stimuli.distortions`: 4 scikit-image pictures x 10
  JPEG / blur / noise candidates, 320 x 240),

it computes, for every real (design) pair and every gold pair, what a script computes from a
trial's files (both files' sizes and their ratio, which one is larger, dimensions, crop geometry,
errors to the reference and their ratio, on full images and crops: :mod:`stimuli.separability`)
and prints the AUC of each statistic as a gold-vs-real classifier (0.5 = chance, 1 = told apart)
and the best one, for the amplified images (the default) and the originals.

``--synthetic`` prepares the same scenes with gold images made of candidate errors (the worse
image a bad candidate's error scaled to twice the worst candidate's, the better one the best
candidate's error halved): the gold perceptlab made before gold pairs became pairs of candidates,
which is what ``stimuli prepare`` still falls back to for a scene with no plain candidate pair.

It prints the recurrence AUC of each study (see below), and the share of gold trials a script answers right by voting for the smaller full image
(``smaller-file bot``) or the larger one (``larger-file bot``): sizes alone, no decoding
(:func:`stimuli.separability.smaller_file_bot`). 0.5 is chance; the ``chance band`` rows are the 99.9 %
bands of a coin on as many gold trials (bots) and of an AUC of as many gold and real pairs
(:func:`stimuli.separability.chance_bound`, :func:`~stimuli.separability.auc_chance_bound`). The
``shorter-body bot`` votes for the file whose compressed stream is shorter before its padding: it parses
the deflate blocks, a decoding statistic that the padding does not claim to hide.

Measured (``.venv/bin/python benchmarks/gold_separability.py``, load average 14-16 on 2 cores, 3-6 min),
before and after ``stimuli prepare`` gave every side file a size drawn apart from its content and balanced
over the gold pairs (:func:`stimuli.prepare._deliver_sizes`), and took gold pairs outside the pair design
(so that they do not recur across workers more than real pairs)::

                                demo amplified  demo original  generated amplified  generated original
    before  smaller-file bot             1.000          0.833                0.458               0.375
            full_bytes_ratio AUC         0.655          0.618                0.541               0.605
            best statistic AUC           0.690          0.689                0.704               0.709
    after   smaller-file bot             0.500          0.500                0.500               0.500
            full_bytes_ratio AUC         0.521          0.540                0.534               0.516
            largest size AUC             0.553          0.540                0.547               0.614
            best statistic AUC           0.743          0.738                0.740               0.747
            (chance bands: bots 0.5 +- 0.336 on 24 gold trials; AUC 0.5 +- 0.21)

The recurrence AUC (``--recurrence WORKERS PAGES``, default 6 x 3: an in-process app on SQLite whose workers
answer through the worker API; :func:`stimuli.separability.recurrence_auc` of every trial's two files) was
0.791 on the demo while gold pairs could be design pairs (tests/server/test_pair_allocation.py, the same
setting), 0.631 with them outside the design; the generated study's was 0.745: only 1-2 of its scenes'
qualifying pairs lie outside the design, so its gold fell back to design pairs, shown as real trials and as
gold. Then ``stimuli prepare`` took gold pairs inside the design first and the server made a design pair's
gold trials votes of that pair (counted toward its target, exported and scaled as such; gold design pairs
take the other pairs' ties last while they are as filled), this session's figures (load average 3-6)::

                                demo amplified  demo original  generated amplified  generated original
    before  recurrence AUC                   0.631                              0.745
            full_bytes_ratio AUC         0.521          0.540                0.534               0.516
            largest size AUC             0.553          0.540                0.547               0.614
            best statistic AUC           0.743          0.738                0.740               0.747
    after   recurrence AUC                   0.500                              0.515
            full_bytes_ratio AUC         0.512          0.525                0.582               0.578
            largest size AUC             0.545          0.526                0.622               0.627
            best statistic AUC           0.734          0.729                0.722               0.723
            smaller-file bot             0.500          0.500                0.500               0.500

The size statistics are drawn at random (content-free), so they move with the gold pairs chosen: the
generated study's largest size AUC over 8 seeds of ``stimuli prepare`` was 0.540-0.615 (mean 0.576) before and
0.529-0.627 (mean 0.586) after, inside the chance band either way. The recurrence AUC holds while the gold
pairs' demand (a quiz of 5 and 2 a page on 24 pairs) does not outrun the pairs' fill: 12 x 3 gives 0.522 / 0.509,
6 x 6 0.656 / 0.500 (a worker who does most of the demo keeps unseen gold for their later pages, so takes no
gold pair as a real trial), 20 x 2 0.837 / 0.500 and 30 x 1 1.0 / 1.0 (the quizzes alone show each gold pair
more often than the real pairs get shown); gold pairs outside the design still recur at the gold rate (the
demo's design redrawn at degree 4: 0.708).

Then (this session, load average 10-13 on 2 cores; ``.venv/bin/python benchmarks/gold_separability.py
--recurrence W P``, 55-62 s CPU each) ``stimuli prepare`` took by default a third of each scene's design pairs
as gold when that many qualify (:data:`stimuli.prepare.GOLD_DESIGN_SHARE`: 43 of the demo's 132 pairs, 36 of
the generated study's 120, against 24 and 24), since a one-page worker's gold share (a quiz of 5 and 2 hidden of
25 trials: 28 %) outran 24 pairs' share of the votes whatever the allocation; and ``study create`` / ``study
show`` warn of a study whose gold pairs are too few for its settings
(:func:`server.paradigms.paired.study.gold_pool_warning`)::

                                          demo amplified  demo original  generated amplified  generated original
    6 a scene  recurrence AUC 30 x 1                 1.000                              1.000
                              20 x 2                 0.837                              0.500
                               6 x 3                 0.500                              0.515
    a third    recurrence AUC 30 x 1                 0.526                              0.552
                              20 x 2                 0.501                              0.507
                               6 x 3                 0.509                              0.603
               full_bytes_ratio AUC         0.519          0.546                0.503               0.586
               best statistic AUC           0.780          0.776                0.759               0.761
               smaller-file bot             0.488          0.488                0.500               0.500
               (chance bands: AUC 0.5 +- 0.17-0.18 on the pairs; recurrence 0.5 +- 0.21 at 6 x 3)

Over 5 study seeds (``--seeds 5``; seed 0 is the row above) the recurrence AUC's mean (range) was, demo /
generated: 30 x 1 0.548 (0.526-0.580) / 0.534 (0.506-0.552), 20 x 2 0.533 (0.501-0.567) / 0.544 (0.507-0.583),
6 x 3 0.522 (0.500-0.536) / 0.558 (0.515-0.603): a little above 0.5 everywhere, inside the chance band, the
generated study's 6 x 3 at seed 0 just above 0.60.
Every qualifying design pair as gold (50 and 46) gave 30 x 1 0.547 / 0.529 and 20 x 2 0.528 / 0.514 but a best
statistic of 0.80 / 0.79: the more of the plainest pairs are gold, the better the errors' difference finds them.

The best statistics are decoding ones (the error difference and ratio to the reference: 0.76-0.78 with a third
of the design gold, 0.72-0.73 with 6 gold pairs a scene inside the design, 0.74-0.75 outside it); the
shorter-body bot, which parses the streams, still gets 1.000 / 0.791 /
0.500 / 0.444: the pixels' compressibility is not hidden.

Run: ``.venv/bin/python benchmarks/gold_separability.py [--synthetic] [--scenes 4] [--recurrence W P]
[--seeds K]`` (about a minute of CPU).
"""
from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from stimuli.demo import build_demo  # noqa: E402
from stimuli.distortions import build_distortion_scenes  # noqa: E402
from stimuli.prepare import prepare_study  # noqa: E402
from stimuli.separability import (IMAGE_STATISTICS, PARSED_STATISTICS, STATISTICS,  # noqa: E402
                                  auc_chance_bound, chance_bound, deflate_body, image_separability,
                                  recurrence_auc, separability, shown_pairs, smaller_file_bot)

NO_CANDIDATE_PAIR = 1e9  # a gold margin no candidate pair reaches: every scene gets synthetic gold


def measure(scene_root: Path, out: Path, synthetic: bool) -> dict:
    """{kind: Separability} of ``scene_root``'s scenes prepared into ``out``."""
    rules = {"gold_margin": NO_CANDIDATE_PAIR} if synthetic else {}
    prepare_study([scene_root], out, progress=False, overwrite=True, **rules)
    return {kind: (separability(pairs), smaller_file_bot(pairs), smaller_file_bot(pairs, deflate_body))
            for kind in ("amplified", "original") for pairs in [shown_pairs(out / "manifest.json", kind)]}


def measure_rating(prepared: Path, folder: Path, stimulus: str):
    """The separability of a rating study's quality-check images over ``prepared``'s scenes."""
    from server.paradigms import read_study_file
    from server.paradigms.rating.study import scene_manifests, write_scene_images

    folder.mkdir(parents=True, exist_ok=True)
    study = folder / f"rating-{stimulus}.toml"
    study.write_text(f'[study]\nkind = "rating"\nslug = "sep-{stimulus}"\nname = "separability"\n'
                     f'manifests = ["{(prepared / "manifest.json").as_posix()}"]\n'
                     f'[rating]\nmethod = "ccr"\nstimulus = "{stimulus}"\n')
    spec = read_study_file(study)
    scenes = {}
    for scene_folder, scene in scene_manifests(spec):
        images = write_scene_images(spec, scene_folder, scene)
        scenes[scene["scene_id"]] = (list(images.candidates.values()), images.checks)
    return image_separability(scenes)


def measure_recurrence(prepared: Path, folder: Path, workers: int, pages: int, seed: int = 0) -> float:
    """:func:`stimuli.separability.recurrence_auc` of a paired-comparison study over ``prepared`` (the study
    file's defaults, ``[study] seed``) after ``workers`` workers answered ``pages`` pages each, through the worker
    API of an in-process app on SQLite (answers: the gold side where there is one, else left)."""
    import uuid

    from sqlalchemy import select
    from sqlalchemy.orm import aliased

    from server import create_app
    from server.models import Study, Worker
    from server.paradigms import create_study, read_study_file
    from server.paradigms.paired.models import Pair, Stimulus, Trial
    from server.services import app_services

    folder.mkdir(parents=True, exist_ok=True)
    study_file = folder / "recurrence.toml"
    study_file.write_text(f'[study]\nslug = "recur"\nname = "recurrence"\nseed = {seed}\n'
                          f'manifests = ["{(prepared / "manifest.json").as_posix()}"]\n'
                          "[entry]\nexternal_hits = true\n")
    app = create_app(database_url=f"sqlite:///{folder / 'recur.db'}", instance_path=str(folder / "instance"),
                     secret_key="benchmark", testing=True, entry_limit=0, admission_rate=0,
                     state_requests_per_minute=0, environment_posts_per_minute=0, live_scales_process=False,
                     forecast_process=False)
    services = app_services(app)
    with services.sessions() as session:
        create_study(session, read_study_file(study_file))
        session.commit()

    def side(trial_id: int) -> str:
        with services.sessions() as session:
            row = session.execute(select(Trial.left_is_a, Trial.is_gold, Pair.gold_winner_id, Pair.stimulus_a_id)
                                  .join(Pair, Trial.pair_id == Pair.id).where(Trial.id == trial_id)).one()
        return "left" if not row.is_gold or (row.gold_winner_id == row.stimulus_a_id) == row.left_is_a else "right"

    client = app.test_client()
    for k in range(workers):
        entry = client.post("/api/v1/studies/recur/assignments", json={
            "platform": "mturk", "worker_id": f"WREC{k:04d}", "assignment_id": f"AREC{k:08d}", "hit_id": "HIT1",
            "turk_submit_to": "https://workersandbox.mturk.com"}).json
        base, headers = f"/api/v1/assignments/{entry['assignment_id']}", {"Authorization": f"Bearer {entry['token']}"}
        for action in ("consent", "instructions_done"):
            client.post(f"{base}/actions", headers=headers, json={"action": action})
        done = 0
        for _ in range(100 * (pages + 2)):  # a bound, should an answer be refused
            state = client.get(f"{base}/state", headers=headers).json
            if state["stage"] == "page_done":
                done += 1
                if client.post(f"{base}/actions", headers=headers, json={
                        "action": "continue" if done < pages else "finish"}).status_code != 200:
                    break
                continue
            if state["stage"] not in ("quiz", "trials"):
                break
            for trial in state["page"]["trials"]:
                if not trial["answered"]:
                    client.post(f"{base}/votes", headers=headers, json={
                        "vote_id": str(uuid.uuid4()), "trial_id": trial["trial_id"],
                        "choice": side(int(trial["trial_id"])), "rt_ms": 1500.0, "input": "mouse",
                        "client_time": "2026-12-07T12:00:00Z", "window": {"width": 1366, "height": 768, "dpr": 1}})
    a, b = aliased(Stimulus), aliased(Stimulus)
    with services.sessions() as session:
        rows = session.execute(select(a.full, b.full, Trial.is_gold).join(Pair, Trial.pair_id == Pair.id)
                               .join(a, Pair.stimulus_a_id == a.id).join(b, Pair.stimulus_b_id == b.id)
                               .join(Worker, Trial.worker_id == Worker.id).join(Study, Worker.study_id == Study.id)
                               .where(Study.slug == "recur")).all()
    services.engine.dispose()
    return recurrence_auc([frozenset((x, y)) for x, y, _ in rows], [bool(g) for _, _, g in rows])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scenes", type=int, default=4, help="scenes per study (1..4)")
    parser.add_argument("--synthetic", action="store_true", help="gold images made of candidate errors (the old gold)")
    parser.add_argument("--recurrence", type=int, nargs=2, metavar=("WORKERS", "PAGES"), default=(6, 3),
                        help="workers and pages each of the in-process study whose recurrence AUC is measured "
                             "(0 0: skip it)")
    parser.add_argument("--seeds", type=int, default=1,
                        help="study seeds the recurrence AUC is measured over (their mean and range are printed)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="gold-separability-") as tmp:
        root = Path(tmp)
        build_demo(root / "demo", n_scenes=args.scenes, progress=False, prepare=False)
        build_distortion_scenes(root / "distorted", n_scenes=args.scenes)
        studies = {"demo": measure(root / "demo" / "scenes", root / "demo_prepared", args.synthetic),
                   "generated": measure(root / "distorted", root / "distorted_prepared", args.synthetic)}
        workers, pages = args.recurrence
        recurrence = ({study: [measure_recurrence(root / f"{folder}_prepared", root / f"recurrence_{folder}_{seed}",
                                                  workers, pages, seed) for seed in range(args.seeds)]
                       for study, folder in (("demo", "demo"), ("generated", "distorted"))} if workers > 0 else {})
        ratings = {(study, kind): measure_rating(root / f"{folder}_prepared", root / "rating", kind)
                   for study, folder in (("demo", "demo"), ("generated", "distorted"))
                   for kind in ("amplified", "original")}
    gold = "synthetic (scaled candidate errors)" if args.synthetic else "pairs of candidates (default)"
    print(f"gold: {gold}; AUC of each statistic, gold against real pairs (0.5 = chance, 1 = told apart)")
    columns = [(study, kind) for study in studies for kind in ("amplified", "original")]
    print(f"{'statistic':<22}" + "".join(f"{f'{study} {kind}':>20}" for study, kind in columns))
    for name in STATISTICS:
        print(f"{name:<22}" + "".join(f"{studies[study][kind][0].aucs[name]:>20.3f}" for study, kind in columns))
    print(f"{'chance band (AUC)':<22}" + "".join(
        f"{f'0.5 +- {auc_chance_bound(studies[s][k][0].n_gold, studies[s][k][0].n_real):.3f}':>20}"
        for s, k in columns))
    print("bots answering gold trials from sizes alone (share right; 0.5 = chance):")
    print(f"{'smaller-file bot':<22}" + "".join(f"{studies[study][kind][1]:>20.3f}" for study, kind in columns))
    print(f"{'larger-file bot':<22}" + "".join(f"{1 - studies[study][kind][1]:>20.3f}" for study, kind in columns))
    print(f"{'chance band (bots)':<22}" + "".join(
        f"{f'0.5 +- {chance_bound(studies[s][k][0].n_gold):.3f}':>20}" for s, k in columns))
    for study, values in recurrence.items():
        spread = f" (mean of {len(values)} study seeds, {min(values):.3f}-{max(values):.3f})" if len(values) > 1 else ""
        print(f"{study:>9}: recurrence AUC {sum(values) / len(values):.3f}{spread} (how often a trial's two files "
              f"recur, gold against real trials; {args.recurrence[0]} workers x {args.recurrence[1]} pages of the "
              "study's defaults)")
    print("parsing the stream (a decoding statistic; not hidden):")
    print(f"{'shorter-body bot':<22}" + "".join(f"{studies[study][kind][2]:>20.3f}" for study, kind in columns))
    print()
    for study, kind in columns:
        result = studies[study][kind][0]
        name, value = result.best
        print(f"{study:>9} {kind:<9}: best single statistic AUC {value:.3f} ({name}); "
              f"{result.n_gold} gold and {result.n_real} real pairs")
    print()
    print("rating studies: AUC of each statistic of one image, quality checks (hidden references, degraded "
          "images) against real candidates")
    print(f"{'statistic':<22}" + "".join(f"{f'{study} {kind}':>20}" for study, kind in ratings))
    for name in IMAGE_STATISTICS:
        print(f"{name:<22}" + "".join(f"{result.aucs[name]:>20.3f}" for result in ratings.values()))
    print("parsing the stream (the pixels' compressibility; not hidden):")
    for name in PARSED_STATISTICS:
        print(f"{name:<22}" + "".join(f"{result.aucs[name]:>20.3f}" for result in ratings.values()))
    for (study, kind), result in ratings.items():
        name, value = max(((n, result.aucs[n]) for n in IMAGE_STATISTICS), key=lambda kv: kv[1])
        print(f"rating {study:>9} {kind:<9}: best single statistic AUC {value:.3f} ({name}); "
              f"{result.n_gold} checks and {result.n_real} real candidates")


if __name__ == "__main__":
    main()
