"""Worker pages in the worker's language: one set of gettext catalogs for templates, Python and browser modules.

Strings a worker reads are marked where they are written: ``{{ _("...") }}`` in templates (new-style
gettext: ``_("Page %(n)s of %(total)s", n=n, total=total)``), :func:`_` in Python at request time and
:func:`_l` for strings made at import time, ``t("...")`` in browser modules
(``experiment_ui/static/js/i18n.js``). The catalogs live in ``server/translations/<locale>/LC_MESSAGES``:
``messages.po`` (templates and Python) and ``browser.po`` (the browser modules' ``t()`` strings, which
:func:`browser_catalog` renders into every page). ``scripts/translations.py`` extracts, updates and
compiles them (``make translations``; docs/languages.md).

**Which language.** A study declares its languages and default (``[study] languages``,
``default_language``). A worker's locale is chosen once, at entry, first match wins among the study's
languages (:func:`choose_locale`): ``?lang=``, the recruiter's ``?locale=`` (the parameter a recruiter or
panel fills in the study URL), the browser's ``Accept-Language``, then the study's default. It is stored
with the worker (``worker.locale``), used for every later page, and a later ``?lang=`` switches it.
"""
from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

from babel import Locale, UnknownLocaleError
from babel.support import Translations
from flask import Flask, g
from flask_babel import Babel, force_locale, gettext, lazy_gettext, lazy_ngettext, ngettext, refresh
from werkzeug.datastructures import LanguageAccept

TRANSLATIONS = Path(__file__).with_name("translations")
DEFAULT_LOCALE = "en"   # the language the msgids are written in: it needs no catalog
BROWSER_DOMAIN = "browser"

_ = gettext
_l = lazy_gettext
__all__ = ["_", "_l", "force_locale", "gettext", "lazy_gettext", "lazy_ngettext", "ngettext", "DEFAULT_LOCALE", "browser_catalog", "choose_locale",
           "current_locale", "init_app", "shipped_locales", "text_direction", "use_locale"]


@cache
def shipped_locales() -> tuple[str, ...]:
    """The locales a study may offer: English (the msgids) and every locale with a compiled catalog."""
    found = sorted(p.parent.parent.name for p in TRANSLATIONS.glob("*/LC_MESSAGES/messages.mo"))
    return (DEFAULT_LOCALE, *(name for name in found if name != DEFAULT_LOCALE))


def _match(wanted: str | None, languages: tuple[str, ...]) -> str | None:
    """The study language ``wanted`` names ("de", "de-AT", "de_DE" -> "de"), or None."""
    if not wanted:
        return None
    tag = wanted.strip().replace("-", "_")
    for candidate in (tag, tag.split("_")[0]):
        for language in languages:
            if candidate.lower() == language.lower():
                return language
    return None


def choose_locale(languages: tuple[str, ...], default: str, *, query: str | None = None,
                  recruiter: str | None = None, accept_language: LanguageAccept | None = None) -> str:
    """The worker's locale among the study's ``languages``: first match wins.

    Parameters
    ----------
    languages, default
        The study's ``[study] languages`` and ``default_language`` (one of them).
    query
        ``?lang=`` of the request: the worker's (or the experimenter's) explicit choice.
    recruiter
        ``?locale=`` of the entry URL: what the recruiter knows of the participant.
    accept_language
        The browser's ``Accept-Language`` (quality order; a region falls back to its language).

    Returns
    -------
    str
        One of ``languages``.
    """
    for wanted in (query, recruiter):
        found = _match(wanted, languages)
        if found:
            return found
    for tag, _quality in (accept_language or []):
        found = _match(tag, languages)
        if found:
            return found
    return default


def use_locale(locale: str) -> None:
    """Render the rest of this request in ``locale`` (its pages, messages and browser catalog)."""
    g.perceptlab_locale = locale
    refresh()   # Flask-Babel caches the locale it chose first


def current_locale() -> str:
    """The request's locale: the one :func:`use_locale` set, else English (admin pages, the API's callers)."""
    return g.get("perceptlab_locale", DEFAULT_LOCALE) if g else DEFAULT_LOCALE


select_locale = current_locale   # the foundation's name for it (Flask-Babel's locale selector)


def text_direction(locale: str) -> str:
    """``"rtl"`` for a right-to-left script (Arabic, Hebrew), else ``"ltr"``: the page's ``<html dir>``."""
    try:
        return "rtl" if Locale.parse(locale).character_order == "right-to-left" else "ltr"
    except (ValueError, UnknownLocaleError):
        return "ltr"


# CLDR's plural categories in the order gettext numbers a language's plural forms (babel's plural expressions).
PLURAL_ORDER = ("zero", "one", "two", "few", "many", "other")


@cache
def _browser_messages(locale: str) -> dict[str, Any]:
    if locale == DEFAULT_LOCALE:
        return {"messages": {}, "plural_tags": ["one", "other"]}
    translations = Translations.load(str(TRANSLATIONS), [locale], domain=BROWSER_DOMAIN)
    messages: dict[str, Any] = {}
    plurals: dict[str, dict[int, str]] = {}
    for key, text in getattr(translations, "_catalog", {}).items():
        if isinstance(key, tuple):          # (singular msgid, form index): tn()'s entries
            plurals.setdefault(key[0], {})[key[1]] = text
        elif key and text:
            messages[key] = text
    messages.update({msgid: [forms[i] for i in sorted(forms)] for msgid, forms in plurals.items()})
    tags = Locale.parse(locale).plural_form.tags | {"other"}
    return {"messages": messages, "plural_tags": [tag for tag in PLURAL_ORDER if tag in tags]}


def browser_catalog() -> dict[str, Any]:
    """The browser modules' strings in the request's locale: ``messages`` (msgid -> text; a plural entry's
    singular msgid -> its forms) and ``plural_tags`` (the CLDR category of each form, for ``tn()``'s
    ``Intl.PluralRules``); a string missing here is shown as written."""
    return _browser_messages(current_locale())


def init_app(app: Flask) -> None:
    """Install Flask-Babel (which gives templates ``_``, ``gettext`` and ``ngettext``), the browser
    catalog every page carries, and the page's language and direction (``page_locale``, ``page_dir``)."""
    Babel(app, locale_selector=current_locale, default_translation_directories=str(TRANSLATIONS))
    app.jinja_env.globals["browser_catalog"] = browser_catalog
    app.jinja_env.globals["page_locale"] = current_locale
    app.jinja_env.globals["page_dir"] = lambda: text_direction(current_locale())
    app.jinja_env.globals["text_direction"] = text_direction
