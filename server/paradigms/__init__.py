"""Experimental paradigms as plugins, and the registry that finds a study's paradigm.

A paradigm is one module under this package that defines a subclass of
:class:`server.paradigms.core.Paradigm` and exposes an instance as ``PARADIGM``. The instance
declares what the paradigm needs: its study-file sections and spec, how it creates a study,
hands out work, records a response, describes its state to the browser, exports its data,
reports progress to the dashboard, and what a unit of pay is. Everything outside this package
asks the registry (:func:`paradigm_for`, :func:`paradigm_named`, or
:func:`server.paradigms.core.study_paradigm` by study ID) and never tests the kind.

Layout::

    stages.py     the Stage enum (one for every paradigm)
    studyfile.py  what every study file shares ([entry], [mturk], typed sections, spec <-> config)
    entry.py      who may enter a study (links, signatures, HITs, the entry rate limit)
    recruiters.py where plain-link participants come from and go back to (Prolific, a redirect URL)
    core.py       the Paradigm base class and the shared lifecycle (enter, lock, complete, stop, replay,
                  pages and trials)
    params.py     study-file keys declared once; sections.py: [pages], [quality], [display] as mixins
    display.py    the window and device every paradigm's pages need (Layout, WindowRequirement)
    paged.py      the paged lifecycle; media.py: the media layer's server half
    wiring.py     what the app factory installs for every paradigm (templates, static files, admin blueprints,
                  init_app)
    paired/       paired comparison ("pc", the default kind)
    motion/       motion matching ("motion")

A paradigm package holds everything its paradigm owns (ARCHITECTURE.md, The paradigm contract):
``__init__.py`` exposing ``PARADIGM``, ``models.py`` (its tables, on :class:`server.models.Base`;
:func:`load_models` imports it wherever every table must be known), ``templates/`` (served as
``"<kind>/<file>"``), its admin blueprint (:meth:`~server.paradigms.core.Paradigm.admin_blueprint`) and
whatever else it needs. Adding a paradigm (an ACR rating scale, a JND staircase): write its package and
name it in :data:`PARADIGM_MODULES` (or call :func:`register` from a plugin, before the app or the
migrations start). This module stays a leaf (it imports no paradigm and no database code at import
time), so that every other module, the models included, may import :mod:`server.paradigms.stages`; a
paradigm's package is imported the first time its kind is asked for.
"""
from __future__ import annotations

import importlib
import importlib.util
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .stages import Stage
from .studyfile import StudyDefinitionError, file_kind, load_study_toml

if TYPE_CHECKING:
    from ..models import Study
    from .core import Paradigm

__all__ = ["DEFAULT_KIND", "PARADIGM_MODULES", "Stage", "StudyDefinitionError", "all_paradigms", "create_study",
           "load_models", "paradigm_for", "paradigm_named", "paradigm_of_spec", "read_study_file", "register",
           "spec_from_config", "stored_kind"]

# Studies whose config (and study file) names no kind are paired comparison, as before kinds existed.
DEFAULT_KIND = "pc"
# kind -> the module that defines it (its PARADIGM).
PARADIGM_MODULES: dict[str, str] = {
    "pc": "server.paradigms.paired",
    "motion": "server.paradigms.motion",
    "rating": "server.paradigms.rating",
}
_REGISTERED: dict[str, Paradigm] = {}


def register(paradigm: Paradigm) -> Paradigm:
    """Make ``paradigm`` the one of its ``kind`` (a plugin outside this package calls this)."""
    _REGISTERED[paradigm.kind] = paradigm
    return paradigm


def paradigm_named(kind: str) -> Paradigm:
    """The paradigm of a kind ("pc", "motion", ...).

    Raises
    ------
    KeyError
        No paradigm has this kind.
    """
    paradigm = _REGISTERED.get(kind)
    if paradigm is None:
        if kind not in PARADIGM_MODULES:
            raise KeyError(f"no paradigm of kind {kind!r} (known: {', '.join(known_kinds())})")
        paradigm = _REGISTERED.setdefault(kind, importlib.import_module(PARADIGM_MODULES[kind]).PARADIGM)
    return paradigm


def known_kinds() -> list[str]:
    """Every kind the registry can find."""
    return list(dict.fromkeys([*PARADIGM_MODULES, *_REGISTERED]))


def all_paradigms() -> list[Paradigm]:
    """Every known paradigm (importing their modules)."""
    return [paradigm_named(kind) for kind in known_kinds()]


def load_models() -> list[str]:
    """Import the ``models`` module of every known paradigm's package, so that :class:`server.models.Base`'s
    metadata and mappers hold every table: Alembic's environment, ``create_all`` and every session factory
    (:func:`server.db.make_session_factory`) call this. A package without a ``models.py`` is skipped.

    Returns
    -------
    list of str
        The models modules imported, in the order of :func:`known_kinds`.
    """
    loaded = []
    for paradigm in all_paradigms():
        name = f"{paradigm.package}.models"
        if importlib.util.find_spec(name) is not None:
            importlib.import_module(name)
            loaded.append(name)
    return loaded


def stored_kind(config: dict[str, Any]) -> str:
    """The kind stored in a ``Study.config`` (paired comparison when it names none)."""
    return config.get("kind") or DEFAULT_KIND


def paradigm_for(study: Study) -> Paradigm:
    """The paradigm of a study (by the kind stored in its config): a dict lookup."""
    return paradigm_named(stored_kind(study.config))


def paradigm_of_spec(spec) -> Paradigm:
    """The paradigm whose spec class ``spec`` is."""
    for paradigm in all_paradigms():
        if isinstance(spec, paradigm.spec_class):
            return paradigm
    raise TypeError(f"{type(spec).__name__} is the spec of no known paradigm")


def spec_from_config(config: dict[str, Any]):
    """The spec stored in ``Study.config``, of the study's paradigm."""
    return paradigm_named(stored_kind(config)).spec_class.from_config(config)


def read_study_file(path: str | Path):
    """Parse and validate a ``study.toml``: its ``[study] kind`` picks the paradigm that reads it.

    Raises
    ------
    StudyDefinitionError
        Naming the file and the problem (an unknown kind among them).
    """
    path = Path(path)
    data = load_study_toml(path)
    kind = file_kind(data) or DEFAULT_KIND
    if not isinstance(kind, str) or kind not in known_kinds():
        raise StudyDefinitionError(f"{path}: study.kind must be one of {', '.join(map(repr, known_kinds()))}, "
                                   f"got {kind!r}")
    return paradigm_named(kind).spec_from_toml(data, path)


def create_study(session, spec) -> Study:
    """Store a study of any paradigm from its spec; the caller commits.

    Raises
    ------
    StudyDefinitionError
        The slug is taken, or something the study shows is missing.
    """
    return paradigm_of_spec(spec).create_study(session, spec)
