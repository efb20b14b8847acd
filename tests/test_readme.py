"""The README and the documentation site (docs/) point at files that exist: every repository path the README's
Layout section names, every path under a top-level folder of the repository anywhere in them (a renamed module
must not leave a dead pointer), and every page the README links to; the data dictionary (docs/data-dictionary.md)
names every column of every file the exports and analyses write."""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
DATA_DICTIONARY = DOCS / "data-dictionary.md"
TOP_LEVEL = ("analysis", "benchmarks", "deploy", "experiment_ui", "server", "stimuli", "tests", ".ci")
_CODE = re.compile(r"`([^`\n]+)`")
_FILE = re.compile(r"[\w.-]+\.(?:py|md|toml|yaml|yml|html|js|css|json|txt|cfg|ini)")


def section(text: str, title: str) -> str:
    """The body of the ``## title`` section of a Markdown text (up to the next ``## `` heading)."""
    match = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", text, re.M | re.S)
    assert match, f"README has no '## {title}' section"
    return match.group(1)


def repo_paths(text: str) -> list[str]:
    """Code spans of ``text`` that name a repository path: under a top-level folder, or a bare file name."""
    found = []
    for span in _CODE.findall(text):
        span = span.strip()
        if span.split("/")[0] in TOP_LEVEL and " " not in span:
            found.append(span)
        elif _FILE.fullmatch(span):
            found.append(span)
    return found


def missing_paths(text: str) -> list[str]:
    """Paths of ``text`` that do not exist: a path with a folder from the repository root, a bare file name
    in one of the folders the same text names (``core.py`` after `server/paradigms/`) or at the root."""
    paths = repo_paths(text)
    folders = [ROOT] + [ROOT / p for p in paths if p.endswith("/")]
    missing = []
    for path in paths:
        if "/" in path:
            ok = (ROOT / path).exists()
        else:
            ok = any((folder / path).exists() for folder in folders)
        if not ok:
            missing.append(path)
    return missing


def test_layout_section_names_only_existing_paths():
    layout = section(README.read_text(encoding="utf-8"), "Layout")
    paths = repo_paths(layout)
    # The section names the top-level folders and the paradigm modules; the check must see them.
    assert {"analysis/", "server/", "server/paradigms/", "core.py"} <= set(paths)
    assert missing_paths(layout) == []


def test_every_repository_path_in_the_readme_and_the_docs_exists():
    pages = [README, *sorted(DOCS.glob("*.md"))]
    assert len(pages) > 10  # the site's pages are seen
    missing = {page.name: [p for p in missing_paths(page.read_text(encoding="utf-8")) if "/" in p] for page in pages}
    assert {name: paths for name, paths in missing.items() if paths} == {}


_LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


def test_every_page_the_readme_links_to_exists():
    links = [link for link in _LINK.findall(README.read_text(encoding="utf-8")) if "://" not in link]
    assert "docs/study-file.md" in links and "docs/cli.md" in links
    assert [link for link in links if not (ROOT / link).is_file()] == []


def test_the_checker_sees_a_dead_pointer():
    assert missing_paths("See `server/nowhere.py` and `DESIGN.md`; `server/paradigms/` holds `core.py`.") == [
        "server/nowhere.py", "DESIGN.md"]




def _spans(text: str) -> set[str]:
    return {span.strip() for span in _CODE.findall(text)}


def _documented(name: str, spans: set[str]) -> bool:
    """``name`` is a code span of the dictionary, or matches one with a placeholder (``field_<clip>.png``)."""
    if name in spans:
        return True
    patterns = [re.escape(s).replace(r"\<", "<").replace(r"\>", ">") for s in spans if "<" in s]
    return any(re.fullmatch(re.sub(r"<[^>]+>", r"[^/]+", p), name) for p in patterns)


def test_data_dictionary_names_every_column_of_every_output_file():
    from analysis.formats import OVERALL_COLUMNS, SCALES_COLUMNS, WORKERS_COLUMNS
    from analysis.motion import TABLE_METRICS
    from analysis.motion_report import (EPE_BINS_COLUMNS, MODEL_PROBES_COLUMNS, OBSERVER_PROBES_COLUMNS,
                                        OBSERVERS_COLUMNS, PROBES_COLUMNS)
    from analysis.pipeline import WORKERS_EXTRA_COLUMNS
    from analysis.protocols import COMPARISON_COLUMNS
    from analysis.rating_report import RATING_WORKERS_COLUMNS, RATING_WORKERS_EXTRA_COLUMNS, SCORES_COLUMNS
    from server.exports import FINGERPRINT_COLUMNS, LOCALE_COLUMNS, RECRUITER_COLUMNS
    from server.paradigms.viewing import WORKER_COLUMNS as VIEWING_COLUMNS
    from server.paradigms.paired.export import VOTES_COLUMNS, WORKERS_META_COLUMNS
    from server.paradigms.motion.export import MOTION_FILES, MOTION_WORKERS_COLUMNS
    from server.paradigms.rating.export import RATINGS_COLUMNS
    from server.wages import WORKER_COLUMNS

    spans = _spans(DATA_DICTIONARY.read_text(encoding="utf-8"))
    columns = {
        "votes.csv": VOTES_COLUMNS, "workers_meta.csv": WORKERS_META_COLUMNS + RECRUITER_COLUMNS + FINGERPRINT_COLUMNS
        + LOCALE_COLUMNS + WORKER_COLUMNS + MOTION_WORKERS_COLUMNS + VIEWING_COLUMNS, "scales.csv": SCALES_COLUMNS, "overall.csv": OVERALL_COLUMNS,
        "pareto.csv": ("item_id", "group"), "workers.csv": WORKERS_COLUMNS + WORKERS_EXTRA_COLUMNS,
        "rerank.csv": ("subjective_rank", "objective_rank", "rank_difference", "objective"),
        **MOTION_FILES, "probes.csv": PROBES_COLUMNS, "observer_probes.csv": OBSERVER_PROBES_COLUMNS,
        "model_probes.csv": MODEL_PROBES_COLUMNS, "observers.csv": OBSERVERS_COLUMNS,
        "epe_by_property.csv": EPE_BINS_COLUMNS, "tables/<metric>_by_dataset.csv": tuple(TABLE_METRICS),
        # analyze-ratings writes a workers.csv of its own columns; compare-protocols comparison.csv
        "scores.csv": SCORES_COLUMNS, "comparison.csv": COMPARISON_COLUMNS, "ratings.csv": RATINGS_COLUMNS,
    }
    columns["workers.csv"] += RATING_WORKERS_COLUMNS + RATING_WORKERS_EXTRA_COLUMNS
    missing = {name: [c for c in cols if c not in spans] for name, cols in columns.items()}
    assert {name: cols for name, cols in missing.items() if cols} == {}
    assert not [name for name in columns if name not in spans]
    assert {"summary.json", "scales.png", "scales.csv"} <= spans


def test_data_dictionary_names_every_file_an_analysis_writes(tmp_path):
    from analysis.motion_report import run_analyze_motion
    from analysis.pipeline import AnalysisOptions, analyze, write_results
    from analysis.simulate import simulate_study

    spans = _spans(DATA_DICTIONARY.read_text(encoding="utf-8"))
    study = simulate_study(n_sets=2, n_items=8, degree=4, votes_per_pair=5, n_workers=12, seed=3)
    objective = {f"m{k:03d}": float(k) for k in range(8)}
    written = write_results(analyze(study.votes, AnalysisOptions(n_boot=10), objective), tmp_path / "votes")
    names = [p.name for p in written]
    assert {"scales.csv", "scales.pdf", "rerank.csv", "pareto.csv"} <= set(names)

    rows = ["worker_id,clip_id,probe_id,repetition,gt_u,gt_v,resp_u,resp_v,cycles,rt_ms,frame_drops,"
            "onset_err_mean_ms,onset_err_sd_ms,dataset,probe_x,probe_y,probe_frame"]
    rng = np.random.default_rng(0)
    for w in range(3):
        for k in range(6):
            gt = (k - 2.5, 1.0 + k % 3)
            rows.append(f"w{w},c1,p{k},1,{gt[0]},{gt[1]},{gt[0] + rng.normal()},{gt[1] + rng.normal()},3,9000,0,0,1,"
                        f"d,{40 + 30 * k},{50 + 20 * k},3")
    (tmp_path / "motion.csv").write_text("\n".join(rows) + "\n")
    run_analyze_motion(tmp_path / "motion.csv", tmp_path / "motion")
    names += [p.relative_to(tmp_path / "motion").as_posix() for p in (tmp_path / "motion").rglob("*") if p.is_file()]
    assert "tables/rho_uv_by_dataset.csv" in names and "plots/field_c1.pdf" in names

    from analysis.protocols import compare_protocols, join_studies, write_comparison
    from analysis.rating_models import simulate_ratings
    from analysis.rating_report import RatingOptions, analyze_ratings, write_rating_results
    from analysis.ratings import build_ratings

    sim = simulate_ratings(12, 8, seed=1)
    ratings = build_ratings(**sim.columns())
    rating_files = write_rating_results(analyze_ratings(ratings, RatingOptions(n_boot=20)), tmp_path / "ratings")
    (tmp_path / "scales.csv").write_text("set_id,item_id,scale\n" + "".join(
        f"s,{stimulus},{k}\n" for k, stimulus in enumerate(sim.stimulus_ids)))
    comparison = compare_protocols(join_studies(tmp_path / "scales.csv", tmp_path / "ratings" / "scores.csv"),
                                   n_boot=20)
    rating_files += write_comparison(comparison, tmp_path / "comparison")
    names += [p.name for p in rating_files]
    assert {"scores.csv", "workers.png", "comparison.pdf"} <= set(names)
    undocumented = [n for n in names if not (_documented(n, spans) or _documented(n.split("/", 1)[-1], spans))]
    assert undocumented == []


_CITED_DOC = re.compile(r"\b([A-Z][A-Z_]+\.md)\b")


def test_code_and_docs_cite_only_documents_of_the_repository():
    """Code, tests and docs cite documents the repository carries (ARCHITECTURE.md, README.md), never a
    file outside it; the architecture document names only existing paths."""
    cited: dict[str, set[str]] = {}
    for path in ROOT.rglob("*"):
        if path.suffix not in {".py", ".js", ".html", ".md", ".toml", ".yaml"} or ".venv" in path.parts:
            continue
        if path == Path(__file__).resolve():  # the dead-pointer example above names one on purpose
            continue
        for name in _CITED_DOC.findall(path.read_text(encoding="utf-8", errors="replace")):
            cited.setdefault(name, set()).add(str(path.relative_to(ROOT)))
    assert "ARCHITECTURE.md" in cited
    assert {name: files for name, files in cited.items() if not (ROOT / name).exists()} == {}
    architecture = (ROOT / "ARCHITECTURE.md").read_text(encoding="utf-8")
    assert [p for p in missing_paths(architecture) if "/" in p] == []
