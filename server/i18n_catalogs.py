"""The translation catalogs' upkeep: extract the marked strings, update every language's catalog, compile them.

Two gettext domains live in ``server/translations/<locale>/LC_MESSAGES`` (server/i18n.py): ``messages``
(templates and Python, keywords ``_``, ``_l``, ``gettext``, ``ngettext``) and ``browser`` (the browser
modules' ``t()``, ``tParts()`` and ``tn()``, which the server hands to the page). The compiled ``.mo`` files are
committed, so a fresh clone needs no step of its own; ``tests/server/test_translations.py`` fails when one
no longer matches its ``.po``, or when a catalog lacks a string the sources mark.

Run ``make translations`` (``python -m server.i18n_catalogs``) after changing worker-facing strings: it
extracts the templates (``.pot``), merges them into every catalog (new strings come in untranslated, changed
ones fuzzy), and compiles. Translate what it reports, then run it again. A new language:
``python -m server.i18n_catalogs --add fr`` (docs/languages.md).
"""
from __future__ import annotations

import argparse
import io
import os
import sys
import tempfile
from pathlib import Path

from babel.messages.catalog import Catalog
from babel.messages.frontend import CommandLineInterface
from babel.messages.mofile import read_mo, write_mo
from babel.messages.pofile import read_po

from .i18n import BROWSER_DOMAIN, DEFAULT_LOCALE, TRANSLATIONS

ROOT = Path(__file__).resolve().parent.parent
DOMAINS = {
    # domain: (mapping of source files to extractors, keywords)
    "messages": ("[python: server/**.py]\n"
                 "[jinja2: experiment_ui/templates/**.html]\n"
                 "[jinja2: server/paradigms/*/templates/**.html]\n",
                 ("_", "_l", "N_", "gettext", "lazy_gettext", "ngettext:1,2", "lazy_ngettext:1,2")),
    BROWSER_DOMAIN: ("[javascript: experiment_ui/static/js/**.js]\nparse_template_string = true\n"
                     "[javascript: server/paradigms/*/static/**.js]\nparse_template_string = true\n",
                     ("t", "tParts", "tn:1,2")),
}


def _pybabel(*args: str) -> None:
    CommandLineInterface().run(["pybabel", "-q", *args])


def template_path(domain: str) -> Path:
    return TRANSLATIONS / f"{domain}.pot"


def extract(domain: str, out: Path | None = None) -> Path:
    """Write the domain's template (every marked string of the sources, with their places) to ``out``."""
    mapping, keywords = DOMAINS[domain]
    out = out or template_path(domain)
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", suffix=".cfg", delete=False) as handle:
        handle.write(mapping)
    config = Path(handle.name)
    here = Path.cwd()
    try:
        os.chdir(ROOT)  # locations relative to the repository ("experiment_ui/templates/done.html:6")
        _pybabel("extract", "--no-default-keywords", *(f"-k{k}" for k in keywords), "-F", str(config),
                 "--sort-by-file", "--project", "perceptlab", "--no-wrap", "-o", str(out), ".")
    finally:
        os.chdir(here)
        config.unlink()
    return out


def locales() -> list[str]:
    """The translated locales (every folder of server/translations with catalogs; English needs none)."""
    if not TRANSLATIONS.is_dir():
        return []
    return sorted(p.name for p in TRANSLATIONS.iterdir() if (p / "LC_MESSAGES").is_dir() and p.name != DEFAULT_LOCALE)


def po_path(locale: str, domain: str) -> Path:
    return TRANSLATIONS / locale / "LC_MESSAGES" / f"{domain}.po"


def compile_catalog(locale: str, domain: str) -> None:
    """Compile one ``.po`` to its ``.mo`` (fuzzy entries left out, as gettext does)."""
    with po_path(locale, domain).open("rb") as handle:
        catalog = read_po(handle, locale)
    with po_path(locale, domain).with_suffix(".mo").open("wb") as handle:
        write_mo(handle, catalog)


def read_catalog(locale: str, domain: str) -> Catalog:
    with po_path(locale, domain).open("rb") as handle:
        return read_po(handle, locale)


def compiled_matches(locale: str, domain: str) -> bool:
    """Whether the committed ``.mo`` holds exactly what compiling the ``.po`` now would."""
    fresh = io.BytesIO()
    write_mo(fresh, read_catalog(locale, domain))
    fresh.seek(0)
    with po_path(locale, domain).with_suffix(".mo").open("rb") as handle:
        committed = read_mo(handle)
    built = read_mo(fresh)
    def entries(catalog: Catalog) -> dict:
        frozen = (lambda value: tuple(value) if isinstance(value, (list, tuple)) else value)
        return {frozen(m.id): frozen(m.string) for m in catalog if m.id}
    return entries(committed) == entries(built)


def untranslated(locale: str, domain: str) -> list[str]:
    """The msgids of ``locale``'s catalog without a usable translation (empty or fuzzy)."""
    return [str(m.id) for m in read_catalog(locale, domain)
            if m.id and (m.fuzzy or not (all(m.string) if isinstance(m.string, tuple) else m.string))]


def update_all(add: str | None = None) -> None:
    """Extract every domain, merge into every locale's catalog (``add``: start a new locale), compile."""
    for domain in DOMAINS:
        pot = extract(domain)
        targets = locales() + ([add] if add and add not in locales() else [])
        for locale in targets:
            if not po_path(locale, domain).exists():
                _pybabel("init", "-D", domain, "-i", str(pot), "-d", str(TRANSLATIONS), "-l", locale, "--no-wrap")
            else:
                _pybabel("update", "-D", domain, "-i", str(pot), "-d", str(TRANSLATIONS), "-l", locale,
                         "--no-wrap", "--ignore-obsolete")
            compile_catalog(locale, domain)
        pot.unlink()
    for locale in locales():
        missing = sum(len(untranslated(locale, domain)) for domain in DOMAINS)
        if missing:
            print(f"{locale}: {missing} strings to translate (server/translations/{locale}/LC_MESSAGES/*.po)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m server.i18n_catalogs", description=__doc__.split("\n\n")[0])
    parser.add_argument("--add", metavar="LOCALE", help="start a catalog for a new language (e.g. fr)")
    args = parser.parse_args(argv)
    update_all(args.add)
    return 0


if __name__ == "__main__":
    sys.exit(main())
