"""What the app factory installs for every known paradigm (ARCHITECTURE.md, The paradigm contract):
its templates in the app's Jinja loader, its browser code under ``/static/paradigms/<kind>/``, its admin
blueprint, and its :meth:`~server.paradigms.core.Paradigm.init_app`.

The app knows no paradigm by name: it calls :func:`install_paradigms` once, after its own blueprints.
A paradigm registered by a plugin (:func:`server.paradigms.register`) must be registered before.
"""
from __future__ import annotations

from pathlib import Path

from flask import Blueprint, Flask, abort, send_from_directory
from jinja2 import BaseLoader, ChoiceLoader, FileSystemLoader, PrefixLoader

from . import all_paradigms


def template_loader(app_loader: BaseLoader | None) -> BaseLoader:
    """The app's own templates first, then every paradigm package's ``templates/`` under its kind:
    ``server/paradigms/paired/templates/admin_study.html`` is the template ``"pc/admin_study.html"``."""
    folders = {paradigm.kind: FileSystemLoader(str(paradigm.template_folder))
               for paradigm in all_paradigms() if paradigm.template_folder is not None}
    return ChoiceLoader([*([app_loader] if app_loader is not None else []), PrefixLoader(folders)])


# Under the app's own /static/, so that a shared script imports a paradigm's as "../paradigms/<kind>/<file>".
STATIC_PREFIX = "/static/paradigms"


def static_folders() -> dict[str, Path]:
    """Kind -> the ``static/`` folder of every paradigm package that has one."""
    return {paradigm.kind: paradigm.static_folder for paradigm in all_paradigms() if paradigm.static_folder is not None}


def static_file(path: str) -> Path | None:
    """The file that the URL path ``/static/paradigms/<kind>/<file>`` names, or None (no such kind, folder
    or file, or a path that leaves the folder): for pages served without the app (the browser tests'
    harnesses)."""
    kind, _, name = path.removeprefix(STATIC_PREFIX + "/").partition("/")
    folder = static_folders().get(kind) if path.startswith(STATIC_PREFIX + "/") else None
    if folder is None or not name:
        return None
    file = (folder / name).resolve()
    return file if folder.resolve() in file.parents and file.is_file() else None


def static_blueprint() -> Blueprint:
    """``/static/paradigms/<kind>/<file>``: the files of every paradigm package's ``static/`` folder
    (:attr:`~server.paradigms.core.Paradigm.static_folder`), served as Flask serves the app's own static
    files (conditional requests, the same caching); 404 for an unknown kind, a package without one, or a
    file outside it."""
    folders = static_folders()
    blueprint = Blueprint("paradigm_static", __name__)

    @blueprint.get(f"{STATIC_PREFIX}/<kind>/<path:filename>")
    def paradigm_static(kind: str, filename: str):
        if kind not in folders:
            abort(404)
        return send_from_directory(folders[kind], filename)  # refuses paths that leave the folder

    return blueprint


def install_paradigms(app: Flask) -> None:
    """Every known paradigm's templates, browser code (:func:`static_blueprint`), admin blueprint
    (:meth:`~server.paradigms.core.Paradigm.admin_blueprint`) and :meth:`~server.paradigms.core.Paradigm.init_app`,
    in ``app``."""
    app.jinja_loader = template_loader(app.jinja_loader)
    app.register_blueprint(static_blueprint())
    for paradigm in all_paradigms():
        blueprint = paradigm.admin_blueprint()
        if blueprint is not None:
            app.register_blueprint(blueprint)
    for paradigm in all_paradigms():
        paradigm.init_app(app)
