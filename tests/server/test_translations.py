"""The translation catalogs (server/translations, kept by server/i18n_catalogs.py): every string the sources mark
is translated in every shipped language, with the same placeholders, and the committed .mo files are the .po
files compiled. A string added to a template or a browser module without its translations fails here; run
``make translations`` and translate what it reports (docs/languages.md)."""
from __future__ import annotations

import re

import pytest
from babel.messages.pofile import read_po

from server import i18n_catalogs
from server.i18n import shipped_locales

PLACEHOLDER = re.compile(r"%\((\w+)\)s")
LOCALES = tuple(locale for locale in shipped_locales() if locale != "en")   # every translated language


@pytest.fixture(scope="module")
def extracted(tmp_path_factory):
    """domain -> the msgids the sources mark now (freshly extracted, not the catalogs' own list)."""
    folder = tmp_path_factory.mktemp("pot")
    found = {}
    for domain in i18n_catalogs.DOMAINS:
        with i18n_catalogs.extract(domain, folder / f"{domain}.pot").open("rb") as handle:
            found[domain] = {m.id for m in read_po(handle) if m.id}
    return found


def _forms(message) -> tuple[str, ...]:
    return message.string if isinstance(message.string, tuple) else (message.string,)


def _ids(message) -> tuple[str, ...]:
    return message.id if isinstance(message.id, tuple) else (message.id,)


def test_the_shipped_languages_are_english_german_and_arabic():
    assert set(shipped_locales()) >= {"en", "de", "ar"}


def test_the_sources_mark_the_worker_pages_strings(extracted):
    """The extraction sees templates, Python and browser modules alike (a broken mapping finds nothing)."""
    assert "Before you start" in extracted["messages"]                        # a template
    assert "Excellent" in extracted["messages"]                              # Python (N_ of the scales)
    assert ("about %(num)s minute", "about %(num)s minutes") in extracted["messages"]   # ngettext
    assert "Which image is closer to the %(reference)s? Click it or press %(keys)s." in extracted["browser"]
    assert "Saving your answer…" in extracted["browser"]                     # a browser module's t()


def catalog_problems(msgids, catalog) -> list[str]:
    """Why ``catalog`` does not translate every one of ``msgids``: lacking, untranslated or fuzzy, or with
    placeholders other than the msgid's (each plural form against the singular's or the plural's)."""
    entries = {m.id: m for m in catalog if m.id}
    problems = []
    for msgid in sorted(msgids, key=str):
        entry = entries.get(msgid)
        if entry is None:
            problems.append(f"lacks {msgid!r}")
        elif entry.fuzzy or not all(_forms(entry)):
            problems.append(f"leaves {msgid!r} untranslated or fuzzy")
        else:
            wanted = {frozenset(PLACEHOLDER.findall(text)) for text in _ids(entry)}
            problems += [f"{msgid!r}: placeholders of {form!r} differ" for form in _forms(entry)
                         if frozenset(PLACEHOLDER.findall(form)) not in wanted]
    return problems


@pytest.mark.parametrize("locale", LOCALES)
@pytest.mark.parametrize("domain", sorted(i18n_catalogs.DOMAINS))
def test_every_marked_string_is_translated_with_the_same_placeholders(extracted, locale, domain):
    problems = catalog_problems(extracted[domain], i18n_catalogs.read_catalog(locale, domain))
    assert not problems, f"{locale}/{domain}.po (run make translations, then translate): {problems}"


@pytest.mark.parametrize("locale", LOCALES)
def test_plural_entries_have_every_form_of_the_language(locale):
    """Arabic has six plural forms, German two: a form left out would show the English one."""
    catalog = i18n_catalogs.read_catalog(locale, "messages")
    plurals = [m for m in catalog if m.id and isinstance(m.id, tuple)]
    assert plurals
    assert all(len(m.string) == catalog.num_plurals for m in plurals)


@pytest.mark.parametrize("locale", LOCALES)
@pytest.mark.parametrize("domain", sorted(i18n_catalogs.DOMAINS))
def test_the_committed_mo_files_are_the_po_files_compiled(locale, domain):
    assert i18n_catalogs.compiled_matches(locale, domain), \
        f"server/translations/{locale}/LC_MESSAGES/{domain}.mo is stale: run make translations"


def test_a_catalog_lacking_a_key_or_a_placeholder_or_marked_fuzzy_fails(extracted):
    """The check above can fail: each kind of gap in a catalog is reported."""
    catalog = i18n_catalogs.read_catalog("de", "browser")
    catalog.delete("Saving your answer…")
    catalog["Region %(n)s"].string = "Ausschnitt"
    catalog["Correct"].flags.add("fuzzy")
    assert catalog_problems(extracted["browser"], catalog) == [
        "leaves 'Correct' untranslated or fuzzy", "'Region %(n)s': placeholders of 'Ausschnitt' differ",
        "lacks 'Saving your answer…'"]
