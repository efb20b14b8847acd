"""Worker pages in the worker's language: one set of gettext catalogs for templates, Python and browser modules.

Strings a worker reads are marked where they are written: ``{{ _("...") }}`` in templates (new-style
gettext: ``_("Page %(n)s of %(total)s", n=n, total=total)``), :func:`_` in Python at request time and
:func:`_l` for strings made at import time, ``t("...")`` in browser modules
(``experiment_ui/static/js/i18n.js``). The catalogs live in ``server/translations/<locale>/LC_MESSAGES``.
"""
from __future__ import annotations

from pathlib import Path

from flask import Flask
from flask_babel import Babel, gettext, lazy_gettext

TRANSLATIONS = Path(__file__).with_name("translations")
DEFAULT_LOCALE = "en"

_ = gettext
_l = lazy_gettext


def select_locale() -> str:
    """The request's locale (English until the study's languages are chosen from)."""
    return DEFAULT_LOCALE


def browser_catalog() -> dict[str, str]:
    """The translations of the browser modules' strings in the request's locale (msgid -> text); a
    string missing here is shown as written."""
    return {}


def init_app(app: Flask) -> None:
    """Install Flask-Babel (which gives templates ``_``, ``gettext`` and ``ngettext``) and the browser
    catalog every page carries."""
    Babel(app, locale_selector=select_locale, default_translation_directories=str(TRANSLATIONS))
    app.jinja_env.globals["browser_catalog"] = browser_catalog
