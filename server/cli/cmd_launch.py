"""``perceptlab launch SCENES_DIR --url https://HOST``: from a folder of scenes to a running study of paired
comparison (the default) or ratings (``--paradigm rating --method acr|acr-hr|dcr|ccr``).

It chains, by calling their functions, what ``stimuli prepare``, ``study template`` + ``study create``,
``storage upload`` and ``mturk launch`` do, keeping everything in the instance folder::

    INSTANCE/stimuli/SLUG/prepared/     the prepared stimuli (manifest.json ...)
    INSTANCE/stimuli/SLUG/source.json   what they were prepared from (files, sizes, times, parameters)
    INSTANCE/studies/SLUG.toml          the study file made from the template with the values given

Running the same command again posts nothing twice: prepared stimuli are reused while the scene
files are unchanged, an existing study with the same settings is reused, and the MTurk launch ID
is derived from the command's values, so an interrupted launch is finished rather than repeated.
"""
from __future__ import annotations

import hashlib
import json
import re
import tomllib
from dataclasses import fields
from pathlib import Path
from typing import Any

import click

from ..storage import file_sha256
from .base import FINITE_FLOAT, FiniteFloatRange, ServerURL, UserError, cli, cli_config, cli_instance
from .cmd_study import DATABASE_OPTION
from .window import ALLOW_OPTION_HELP, check_window

SOURCE_FILE = "source.json"
# --paradigm -> the paradigm's kind: the paradigms a study of scene folders (a reference and its processed
# versions each) is launched as. Named by their packages (server/paradigms/paired, .../rating); the options
# and wording are about stimuli, not images, so that other media take the same path.
PARADIGMS = {"paired": "pc", "rating": "rating"}
# --method -> [rating] method: ACR-HR is an ACR study whose hidden references are data (P.910), analysed
# with `perceptlab analyze-ratings --dmos`.
METHODS = {"acr": "acr", "acr-hr": "acr", "dcr": "dcr", "ccr": "ccr"}
# The options of one paradigm only (field names of its spec).
PAIRED_ONLY = ("votes_per_pair", "pairs_per_page")
RATING_ONLY = ("method", "ratings_per_stimulus", "ratings_per_page")


@cli.command("launch")
@click.argument("scenes_dir", type=click.Path(path_type=Path))
@click.option("--url", required=True, type=ServerURL(), metavar="https://HOST",
              help="The perceptlab server that serves this instance folder (workers get HOST/s/SLUG).")
@click.option("--sandbox/--live", default=True, show_default=True,
              help="Post the HITs in the MTurk sandbox (no money) or on the live marketplace (asks for the "
                   "total cost first unless --yes).")
@click.option("--assignments", type=click.IntRange(1), default=9, show_default=True,
              help="MTurk assignments in all (one worker each).")
@click.option("--per-hit", type=click.IntRange(1), default=9, show_default=True,
              help="Assignments per HIT (10 or more costs 40% commission instead of 20%).")
@click.option("--days", type=FiniteFloatRange(0.01), default=7, show_default=True, help="How long the HITs stay up.")
@click.option("--no-hits", is_flag=True,
              help="Stop before MTurk: prepare, create and upload only (plain links: Prolific and others).")
@click.option("--slug", default=None, help="The study's URL name [default: from SCENES_DIR's folder name].")
@click.option("--title", default=None,
              help="The study's name, shown in workers' page titles and on the dashboard [default: the slug].")
@click.option("--study-file", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="A study.toml to start from instead of `perceptlab study template`; its manifests are replaced "
                   "by the prepared stimuli and the options given here override its values.")
@click.option("--researcher", default=None,
              help='Who runs the study, for the default consent text ("Dr A. Lee, Univ. of X"); required by it.')
@click.option("--contact", default=None,
              help='Whom workers may ask, for the default consent text ("a.lee@x.edu"); required by it.')
@click.option("--paradigm", type=click.Choice(sorted(PARADIGMS)), default=None,
              help="What workers do with the stimuli: 'paired' (paired comparison: which of two is closer to the "
                   "reference) or 'rating' (a rating of each stimulus on a scale, see --method) [default: the "
                   "--study-file's kind, else paired].")
@click.option("--method", type=click.Choice(list(METHODS)), default=None,
              help="--paradigm rating: the scale (ITU-T P.910): 'acr' (each stimulus alone, Excellent..Bad), "
                   "'acr-hr' (ACR whose hidden references are data: analyse with analyze-ratings --dmos), 'dcr' "
                   "(the reference, then the stimulus, Imperceptible..Very annoying), 'ccr' (both in random order, "
                   "Much worse..Much better) [template: dcr].")
@click.option("--votes-per-pair", type=click.IntRange(1), default=None,
              help="Paired: votes each pair needs [template: 20].")
@click.option("--pairs-per-page", type=click.IntRange(1), default=None, help="Paired: trials per page [template: 20].")
@click.option("--ratings-per-stimulus", type=click.IntRange(1), default=None,
              help="Rating: ratings each stimulus needs [template: 24].")
@click.option("--ratings-per-page", type=click.IntRange(2), default=None,
              help="Rating: ratings per page [template: 20].")
@click.option("--min-pages", type=click.IntRange(1), default=None,
              help="Pages a worker must complete (the HIT reward pays for them) [template: 1].")
@click.option("--max-pages", type=click.IntRange(1), default=None,
              help="Most pages per worker; each after --min-pages earns the bonus [template: 10].")
@click.option("--reward-per-page", default=None, metavar="DOLLARS", help='Reward per page, e.g. "0.50" [template].')
@click.option("--bonus-per-page", default=None, metavar="DOLLARS",
              help='Bonus per page after --min-pages, e.g. "0.40" [template].')
@click.option("--seed", type=int, default=None,
              help="Seed of the pair designs (0 when not given) and of the study [template: 0].")
@click.option("--stimulus", type=click.Choice(["amplified", "original"]), default=None,
              help="Show the candidates with their artefacts amplified, or as given (the instructions follow) "
                   "[template: amplified].")
@click.option("--alpha", type=FINITE_FLOAT, default=None,
              help="Artefact amplification factor (> 1) of the prepared images [stimuli prepare: 1.5].")
@click.option("--top-k", type=int, default=None,
              help="Zoom crops per scene, 0 = none; a crop covering more than half of the image is never offered "
                   "[stimuli prepare: 3].")
@click.option("--zoom", type=FINITE_FLOAT, default=None,
              help="Display magnification of the zoom crops [stimuli prepare: 1.5].")
@click.option("--launch-id", default=None,
              help="MTurk launch ID [default: derived from the study, URL, marketplace and assignments, so the "
                   "same command again finishes an interrupted launch]; a new ID posts another batch.")
@click.option("--yes", is_flag=True, help="Do not ask before posting on the live marketplace.")
@click.option("--allow-large-window", is_flag=True, help=ALLOW_OPTION_HELP)
@DATABASE_OPTION
def launch_command(scenes_dir: Path, url: str, sandbox: bool, assignments: int, per_hit: int, days: float,
                   no_hits: bool, slug: str | None, title: str | None, study_file: Path | None,
                   researcher: str | None, contact: str | None, paradigm: str | None, method: str | None,
                   votes_per_pair: int | None, pairs_per_page: int | None, ratings_per_stimulus: int | None,
                   ratings_per_page: int | None, min_pages: int | None,
                   max_pages: int | None, reward_per_page: str | None, bonus_per_page: str | None,
                   seed: int | None, stimulus: str | None, alpha: float | None, top_k: int | None,
                   zoom: float | None, launch_id: str | None, yes: bool, allow_large_window: bool,
                   database_url: str | None) -> None:
    """Prepare SCENES_DIR, create a study of paired comparison (the default) or ratings (--paradigm rating
    --method acr|acr-hr|dcr|ccr), upload its stimuli and post its HITs.

    SCENES_DIR is a folder of scene folders (each a reference.<ext> and two or more processed versions of it,
    as for `perceptlab stimuli prepare`), or a folder `perceptlab stimuli prepare` wrote (used as it is).
    Both paradigms take the same folders: a paired study compares a scene's versions two by two against
    the reference, a rating study rates each version (ACR alone, DCR after the reference, CCR beside it).
    Both take images and videos alike: scene folders of video clips (reference.mp4, .y4m, .webm ...) make a
    video study, played without controls after a whole-file preload (paired comparison: the two clips side
    by side, started on the same frame, the reference between them or before them, [media]
    reference_position).

    \b
    1. stimuli: prepared into INSTANCE/stimuli/SLUG/prepared (reused while the scenes are unchanged);
    2. study:   INSTANCE/studies/SLUG.toml from the template (or --study-file) with the values given,
                then created (an existing study with the same settings is reused);
    3. storage: uploaded to S3 when [storage] backend = "s3" (else the server serves them itself);
    4. MTurk:   HITs posted to --url (sandbox unless --live; --live shows the cost with MTurk's fees
                and asks first; --no-hits stops before this step).

    The server at --url must run on the same instance folder (perceptlab --instance DIR serve, or
    PERCEPTLAB_INSTANCE=DIR for gunicorn), so that it has this study and secret key.
    """
    from server.cli.base import cli_session
    from server.cli.cmd_mturk import mturk_errors, show_time_and_wage, study_url
    from server.paradigms.studyfile import slugify

    live = not sandbox
    scenes = scenes_dir.absolute()
    if not scenes.is_dir():
        raise UserError(f"{scenes}: no such folder (a folder of scene folders, or of prepared stimuli)")
    slug = slug or slugify(scenes.name)
    full_url = study_url(url, slug)
    instance = cli_instance()
    if not no_hits:
        _check_hit_url(full_url)
    preparation = {name: value for name, value in (("alpha", alpha), ("top_k", top_k), ("zoom", zoom))
                   if value is not None}
    stimuli = _Stimuli(scenes, instance / "stimuli" / slug, seed or 0, preparation)
    kind = _launch_kind(paradigm, study_file)
    video = _refuse_videos(scenes, kind)
    if video:
        _refuse_image_options(preparation, stimulus)
    values = _study_values(slug, title, stimuli.manifest, seed, kind, votes_per_pair=votes_per_pair,
                           pairs_per_page=pairs_per_page, method=METHODS.get(method or ""),
                           ratings_per_stimulus=ratings_per_stimulus, ratings_per_page=ratings_per_page,
                           min_pages=min_pages, max_pages=max_pages,
                           reward_per_page=reward_per_page, bonus_per_page=bonus_per_page, researcher=researcher,
                           contact=contact, stimulus=stimulus)
    if video and study_file is None:
        values = _video_values(kind, values)
    target = instance / "studies" / f"{slug}.toml"
    with mturk_errors(), cli_session(database_url, create=True) as session:
        spec, text = _study_spec(study_file, values, target, kind)
        study = _existing_study(session, spec, stimuli)
        service = None if no_hits else _mturk_service(session, live)
        if service is not None:
            _show_cost(spec, assignments, per_hit, live, full_url, yes)
        click.echo(f"1/4 stimuli: {stimuli.make(may_replace=study is None)}")
        # The window the trial pages need, now that the stimuli are known; a laptop-sized one unless allowed.
        click.echo(f"    {check_window(spec, allow_large_window or study is not None, str(study_file or target))}")
        if study is None:
            study = _create_study(session, spec, text, target)
            click.echo(f"2/4 study: created {slug!r} from {target}: {_summary(session, study)}")
            show_time_and_wage(session, study)  # what the work takes and pays by the hour
        else:
            click.echo(f"2/4 study: {slug!r} exists already with these stimuli and settings; reused "
                       f"({_summary(session, study)})")
        session.commit()
        click.echo(f"3/4 storage: {_upload(session, slug)}")
        if service is None:
            click.echo("4/4 MTurk: skipped (--no-hits)")
        else:
            click.echo(f"4/4 MTurk ({'LIVE' if live else 'sandbox'}):")
            _post(service, study, full_url, assignments=assignments, per_hit=per_hit, days=days,
                  launch_id=launch_id or _launch_id(slug, full_url, live, assignments, per_hit), live=live)
    _next_steps(slug, full_url, instance, no_hits, url)
    if method == "acr-hr":
        click.echo(f"ACR-HR:      {slug}'s hidden references are rated as data: analyse its ratings.csv with "
                   "perceptlab analyze-ratings --dmos")


# ---------------------------------------------------------------- 1. stimuli

def _refuse_videos(scenes: Path, kind: str) -> bool:
    """Whether ``scenes`` holds videos; one line for video folders launched as a study of a paradigm that shows
    no videos."""
    from server.paradigms import paradigm_named
    from stimuli.media import VIDEO
    from stimuli.prepare import study_media_kind

    try:
        video = study_media_kind([scenes]) == VIDEO
    except ValueError:
        return False  # not scene folders: the steps below say what is wrong
    if video and not paradigm_named(kind).shows_video:
        raise UserError(f"{scenes}: holds videos; {paradigm_named(kind).title} does not show videos yet: launch them "
                        "with --paradigm rating --method acr|dcr|ccr or --paradigm paired")
    return video


def _refuse_image_options(preparation: dict[str, Any], stimulus: str | None) -> None:
    """One line for the options that shape images (zoom crops, amplification) given for video clips."""
    from .cmd_stimuli_prepare import image_only_error

    if preparation or stimulus == "amplified":
        raise image_only_error(sorted(preparation) or ["stimulus amplified"])


def _video_values(kind: str, values: dict[tuple[str, str], Any]) -> dict[tuple[str, str], Any]:
    """``values`` over what the paradigm sets for video clips (:attr:`Paradigm.video_launch_values`), said once."""
    from server.paradigms import paradigm_named

    defaults, reason = paradigm_named(kind).video_launch_values
    if defaults:
        click.echo(f"    videos: {reason}")
    return {**defaults, **values}


class _Stimuli:
    """The study's prepared stimuli: SCENES_DIR itself when it was prepared already, else a folder in
    the instance prepared from it, reused while the scene files and parameters are unchanged."""

    def __init__(self, scenes: Path, folder: Path, seed: int, preparation: dict[str, Any] | None = None):
        # preparation: the prepare options given (alpha, top_k, zoom); only those given enter the
        # fingerprint, so that stimuli prepared before these options existed stay up to date.
        self.scenes, self.folder, self.seed, self.preparation = scenes, folder, seed, dict(preparation or {})
        self.given_prepared = _is_prepared(scenes)
        self.manifest = scenes / "manifest.json" if self.given_prepared else folder / "prepared" / "manifest.json"

    def fingerprint(self, known: dict[str, Any] | None = None) -> dict[str, Any]:
        """Every input image (size, modification time, SHA-256) and the preparation's parameters. Files
        whose size and time match ``known`` (an earlier fingerprint) are not read again."""
        from stimuli.media import is_media_file
        from stimuli.prepare import scene_folders

        try:
            folders = scene_folders(self.scenes)
        except Exception as exc:  # noqa: BLE001 - stimuli's input errors, one line
            raise UserError(str(exc)) from None
        before = (known or {}).get("files", {})
        files = {}
        for folder in folders:
            for path in sorted(folder.iterdir()):
                if is_media_file(path):
                    name, stat = str(path.relative_to(self.scenes)), path.stat()
                    seen = before.get(name)
                    same = seen is not None and seen[:2] == [stat.st_size, stat.st_mtime_ns]
                    files[name] = [stat.st_size, stat.st_mtime_ns, seen[2] if same else file_sha256(path)]
        return {"scenes": str(self.scenes), "files": files, "parameters": {"seed": self.seed, **self.preparation}}

    def up_to_date(self) -> bool:
        """Whether the prepared stimuli were made from these very files (by content: a copied or touched
        scene folder still counts as unchanged) with these parameters."""
        if self.given_prepared:
            return True
        source = self.folder / SOURCE_FILE
        try:
            recorded = json.loads(source.read_text())
        except (OSError, ValueError):
            return False
        if not self.manifest.is_file():
            return False
        now = self.fingerprint(recorded)
        return _content(now) == _content(recorded)

    def make(self, *, may_replace: bool) -> str:
        """Prepare (or reuse) the stimuli; a line saying which. ``may_replace`` is false once a study
        shows them: a running study's images are never replaced."""
        from .cmd_stimuli_prepare import echo_gold_report, prepare_scenes, prepared_summary

        if self.given_prepared:
            if self.preparation:
                given = ", ".join("--" + name.replace("_", "-") for name in self.preparation)
                raise UserError(f"{self.scenes} was prepared already: {given} cannot change it (launch the scene "
                                "folders instead, or prepare them again)")
            return f"{self.scenes} was prepared already: used as it is"
        if self.up_to_date():
            return f"up to date in {self.manifest.parent} (reused; the scene files are unchanged)"
        if not may_replace:
            raise UserError(f"the scenes in {self.scenes} changed since this study's stimuli were prepared from them "
                            f"(or {self.manifest.parent} is gone); a study's stimuli are never replaced under it: "
                            "launch the new scenes under another --slug")
        fingerprint = self.fingerprint()
        if not fingerprint["files"]:
            raise UserError(f"{self.scenes}: no images or videos in its scene folders")
        click.echo(f"1/4 stimuli: preparing {len(fingerprint['files'])} files of {self.scenes} ...")
        manifest = prepare_scenes([self.scenes], self.manifest.parent, overwrite=True, seed=self.seed,
                                  **self.preparation)
        echo_gold_report(manifest)
        (self.folder / SOURCE_FILE).write_text(json.dumps(fingerprint, indent=1) + "\n")
        return f"prepared {prepared_summary(manifest)} -> {self.manifest.parent}"


def _content(fingerprint: dict[str, Any]) -> tuple:
    """What a fingerprint says about the inputs' content (not their times)."""
    files = {name: (entry[0], entry[2] if len(entry) > 2 else None) for name, entry in fingerprint["files"].items()}
    return fingerprint.get("scenes"), files, fingerprint.get("parameters")


def _is_prepared(folder: Path) -> bool:
    """Whether ``folder`` is the output of ``perceptlab stimuli prepare`` (its manifest.json says so)."""
    try:
        manifest = json.loads((folder / "manifest.json").read_text())
    except (OSError, ValueError):
        return False
    return isinstance(manifest, dict) and manifest.get("kind") in ("study", "scene")


# ---------------------------------------------------------------- 2. the study

def _launch_kind(paradigm: str | None, study_file: Path | None) -> str:
    """The kind of the study to launch: ``--paradigm``'s, else the ``--study-file``'s, else paired comparison;
    a :class:`UserError` when the two disagree."""
    from server.paradigms import DEFAULT_KIND, StudyDefinitionError
    from server.paradigms.studyfile import file_kind, load_study_toml

    in_file = None
    if study_file is not None:
        try:
            in_file = file_kind(load_study_toml(study_file)) or DEFAULT_KIND
        except StudyDefinitionError as exc:
            raise UserError(str(exc)) from None
    if paradigm is None:
        return in_file or DEFAULT_KIND
    kind = PARADIGMS[paradigm]
    if in_file is not None and in_file != kind:
        raise UserError(f"--paradigm {paradigm} but {study_file} is a study of kind {in_file!r}: give one of them")
    return kind


def _study_values(slug: str, title: str | None, manifest: Path, seed: int | None, kind: str,
                  **options) -> dict[tuple[str, str], Any]:
    """(section, key) -> value of the study file, from the command's options (None = the template's); each
    key's section as the spec of the paradigm ``kind`` declares it. An option of another paradigm is a
    :class:`UserError`."""
    from server.paradigms import paradigm_named
    from server.paradigms.params import section_of

    sections = section_of(paradigm_named(kind).spec_class)
    foreign = [key for key, value in options.items() if value is not None and key not in sections]
    if foreign:
        names = ", ".join("--" + key.replace("_", "-") for key in foreign)
        owner = "paired" if set(foreign) <= set(PAIRED_ONLY) else "rating" if set(foreign) <= set(RATING_ONLY) else None
        raise UserError(f"{names}: not an option of a {paradigm_named(kind).title} study"
                        + (f" (it is one of --paradigm {owner})" if owner else ""))
    values: dict[tuple[str, str], Any] = {("study", "slug"): slug, ("study", "manifests"): [str(manifest)]}
    if seed is not None:
        values["study", "seed"] = seed
    if title is not None:
        values["study", "name"] = title
    values.update({(sections[key], key): value for key, value in options.items() if value is not None})
    return values


def _study_spec(study_file: Path | None, values: dict[tuple[str, str], Any], target: Path, kind: str):
    """The validated spec of the template of the paradigm ``kind`` (or ``study_file``) filled with ``values``,
    as if read from ``target``; and the study file's text."""
    from server.paradigms import StudyDefinitionError, paradigm_named, read_study_file
    from server.paradigms.consent import check_consent_filled
    from server.paradigms.studyfile import load_study_toml

    if study_file is not None:
        try:
            load_study_toml(study_file)  # a file that is no TOML: its one line, as `study create` says it
            base = study_file.read_text(encoding="utf-8-sig")
        except StudyDefinitionError as exc:
            raise UserError(str(exc)) from None
        except OSError as exc:
            raise UserError(f"{study_file}: {exc.strerror or exc}") from None
    else:
        base = paradigm_named(kind).template
    if ("study", "name") not in values and not _has_key(base, "study", "name", study_file is not None):
        values = {**values, ("study", "name"): values["study", "slug"]}
    text = fill_template(base, values)
    target.parent.mkdir(parents=True, exist_ok=True)
    scratch = target.with_name(f".{target.name}.new")  # read where it will live: relative paths stay right
    scratch.write_text(text, encoding="utf-8")
    try:
        spec = read_study_file(scratch)
        check_consent_filled(spec, str(study_file or target))  # workers see who runs the study, whom to ask
        return spec, text
    except StudyDefinitionError as exc:
        raise UserError(str(exc).replace(str(scratch), str(study_file or target))) from None
    finally:
        scratch.unlink(missing_ok=True)


def _has_key(text: str, section: str, key: str, from_user: bool) -> bool:
    """Whether a user's study file sets ``[section] key`` (the template's placeholder name never counts)."""
    return from_user and key in tomllib.loads(text).get(section, {})


def fill_template(text: str, values: dict[tuple[str, str], Any]) -> str:
    """``text`` (a study.toml) with ``[section] key = value`` set for every item of ``values``: an existing
    line keeps its comment, a missing key is added under its section (made at the end when missing).

    Raises
    ------
    UserError
        The result does not read back as TOML with these values (a file this function cannot edit).
    """
    lines = text.splitlines()
    todo = dict(values)
    section, in_string, headers = "", False, {}
    for number, line in enumerate(lines):
        if in_string or line.count('"""') % 2 or line.count("'''") % 2:
            in_string ^= bool(line.count('"""') % 2 or line.count("'''") % 2)
            continue
        header = re.match(r"\s*\[([A-Za-z0-9_-]+)\]\s*(#.*)?$", line)
        if header:
            section = header.group(1)
            headers[section] = number
            continue
        assignment = re.match(r"(\s*)([A-Za-z0-9_-]+)(\s*=\s*)(.*)$", line)
        if assignment and (section, assignment.group(2)) in todo:
            comment = re.search(r"\s+#[^\"']*$", assignment.group(4))
            value = toml_value(todo.pop((section, assignment.group(2))))
            if comment:  # keep the comment in its column when the new value leaves room
                value = value.ljust(comment.start() + len(comment.group(0)) - len(comment.group(0).lstrip()) - 1)
                value += " " + comment.group(0).strip() if value.endswith(" ") else "  " + comment.group(0).strip()
            lines[number] = f"{assignment.group(1)}{assignment.group(2)}{assignment.group(3)}{value}"
    for (section, key), value in sorted(todo.items(), key=lambda item: -headers.get(item[0][0], len(lines))):
        if section in headers:
            lines.insert(headers[section] + 1, f"{key} = {toml_value(value)}")
        else:
            lines += ["", f"[{section}]", f"{key} = {toml_value(value)}"]
            headers[section] = len(lines) - 2
    filled = "\n".join(lines) + "\n"
    try:
        data = tomllib.loads(filled)
    except tomllib.TOMLDecodeError as exc:
        raise UserError(f"cannot fill in the study file: {exc}") from None
    for (section, key), value in values.items():
        if data.get(section, {}).get(key) != value:
            raise UserError(f"cannot set [{section}] {key} in the study file (edit it by hand)")
    return filled


def toml_value(value: Any) -> str:
    """A TOML literal of a str, bool, int, float or list of those (strings as JSON-escaped basic strings)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    return json.dumps(str(value), ensure_ascii=False)


def _existing_study(session, spec, stimuli: _Stimuli):
    """The study of ``spec.slug`` if it exists with the same settings (to reuse), None when there is none;
    a :class:`UserError` when the slug is taken by other settings or stimuli."""
    from sqlalchemy import select

    from server.models import Study
    from server.paradigms import spec_from_config

    study = session.scalar(select(Study).where(Study.slug == spec.slug))
    if study is None:
        return None
    stored = spec_from_config(study.config)
    if type(stored) is not type(spec):
        raise UserError(f"a study {spec.slug!r} of another kind exists already: choose another --slug")
    differ = [f.name for f in fields(spec) if f.compare and getattr(stored, f.name) != getattr(spec, f.name)]
    if differ:
        shown = ", ".join(f"{name} {getattr(stored, name)!r} (now {getattr(spec, name)!r})" for name in differ[:3])
        raise UserError(f"study {spec.slug!r} exists already with other settings: {shown}; choose another --slug "
                        f"or give the same values")
    if not stimuli.up_to_date():
        stimuli.make(may_replace=False)  # raises: the scenes changed under a created study
    return study


def _create_study(session, spec, text: str, target: Path):
    from server.paradigms import StudyDefinitionError, create_study

    try:
        study = create_study(session, spec)
    except StudyDefinitionError as exc:
        raise UserError(str(exc)) from None
    target.write_text(text, encoding="utf-8")  # the record of what was created
    return study


def _summary(session, study) -> str:
    from .cmd_study import _summary as summary

    return summary(session, study)


# ---------------------------------------------------------------- 3. storage

def _upload(session, slug: str) -> str:
    from server.storage import S3Storage, StorageError, make_storage

    from .cmd_storage import study_stimulus_index, upload_index

    try:
        storage = make_storage(cli_config())
    except (StorageError, ValueError) as exc:
        raise UserError(str(exc)) from None
    index = study_stimulus_index(session, slug)
    if not isinstance(storage, S3Storage):
        return (f"local: the server serves the {len(index.paths)} files from {index.root} (set [storage] "
                "backend = \"s3\" to upload them)")
    report = upload_index(storage, index)
    return f"{report.summary()} -> s3://{storage.bucket}/{storage.key(slug, '')}/"


# ---------------------------------------------------------------- 4. MTurk

def _check_hit_url(full_url: str) -> None:
    from server.mturk import MTurkError, MTurkService

    try:
        MTurkService.external_question_xml(full_url)
    except MTurkError as exc:
        raise UserError(f"{exc} (--no-hits to create the study without HITs)") from None


def _mturk_service(session, live: bool):
    from server.mturk import MTurkService

    from .cmd_mturk import client_factory

    return MTurkService(client_factory(live), session, sandbox=not live)


def _show_cost(spec, assignments: int, per_hit: int, live: bool, full_url: str, yes: bool) -> None:
    from server.paradigms import paradigm_of_spec

    from .cmd_mturk import confirm_live_cost, show_launch_cost

    total = show_launch_cost(paradigm_of_spec(spec).pay_unit(spec), assignments, per_hit, live, full_url)
    confirm_live_cost(total, live, yes)


def _launch_id(slug: str, url: str, live: bool, assignments: int, per_hit: int) -> str:
    """The same for the same command: running it again finishes the launch instead of posting more."""
    key = json.dumps([slug, url, live, assignments, per_hit])
    return "L" + hashlib.sha256(key.encode()).hexdigest()[:11]


def _post(service, study, full_url: str, **options) -> None:
    from .cmd_mturk import post_hits

    post_hits(service, study, url=full_url, **options)


def serve_options(url: str) -> str:
    """The ``perceptlab serve`` options that make the server answer at ``url``: its port when the URL
    names one (or the scheme's, for a server on this machine), and the host for a server on this machine
    other than serve's default 127.0.0.1. A public URL on its scheme's port (behind a proxy) needs none."""
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    try:
        port = parts.port
    except ValueError:
        return ""
    host = parts.hostname or ""
    local = host in ("127.0.0.1", "localhost", "::1") or host.startswith("127.")
    options = []
    if local and host not in ("127.0.0.1", "localhost"):
        options.append(f"--host {host}")
    if port is None and local:
        port = 443 if parts.scheme == "https" else 80
    if port is not None:
        options.append(f"--port {port}")
    return " ".join(options)


def _next_steps(slug: str, full_url: str, instance: Path, no_hits: bool, url: str) -> None:
    import shlex

    from server.pilot import preview_link

    from .base import cli_secret_key
    from .cmd_server import perceptlab_command

    on_instance = f"{perceptlab_command()} --instance {shlex.quote(str(instance))}"
    click.echo(f"worker link: {full_url}" + ("?participant=ID (or your recruiter's parameters)" if no_hits else ""))
    base = full_url.rsplit("/s/", 1)[0]
    click.echo(f"preview:     {preview_link(cli_secret_key(), slug, base)}   (you as a worker; counts in nothing)")
    options = serve_options(url)
    click.echo(f"serve it:    {on_instance} serve{' ' + options if options else ''}   (or gunicorn "
               f"'server:create_app()' with PERCEPTLAB_INSTANCE={shlex.quote(str(instance))})")
    results = shlex.quote(str(Path(f"results-{slug}").absolute()))
    click.echo(f"results:     {on_instance} results {slug} --out {results}")
