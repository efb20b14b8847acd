"""The reference pages of the documentation site that code writes: the study file and the command line.

``docs/study-file.md`` and ``docs/cli.md`` hold prose and a marker line (``<!-- generated: study-file -->``,
``<!-- generated: cli -->``); MkDocs (``mkdocs.yml`` names this file under ``hooks:``) calls
:func:`on_page_markdown` for every page, which replaces each marker by the Markdown its generator writes:

- :func:`study_file_markdown`: every section and key of every paradigm's study file, from the ``param(...)``
  declarations of its spec (server/paradigms/params.py): type, default, allowed values, documentation;
- :func:`cli_markdown`: every command of ``perceptlab`` (server/cli/) with its usage, help and options,
  read from click.

So the reference cannot drift from the code: a key or an option exists in the docs exactly when it exists in
the code. MkDocs loads this file by its path, so it imports absolutely.
"""
from __future__ import annotations

import re
import typing
from collections.abc import Callable
from dataclasses import MISSING
from typing import Any

import click

MARKER = re.compile(r"^<!-- generated: ([\w-]+) -->$", re.M)
LONG_DEFAULT = 60  # characters: a longer default (a consent text) is named, not shown


# ---------------------------------------------------------------- the study file

def _type_text(annotation: Any) -> str:
    """A key's type for people: ``int``, ``list of str``, ``table``."""
    origin = typing.get_origin(annotation)
    if origin in (tuple, list):
        return f"list of {_type_text(typing.get_args(annotation)[0])}"
    if origin is dict or annotation is dict:
        return "table"
    return getattr(annotation, "__name__", str(annotation))


def _default_text(declared) -> str:
    """The default as TOML (``5``, ``"dcr"``), or what stands in for it: required, derived, a built-in text."""
    from server.paradigms.params import toml_value

    p = declared.param
    if p.required:
        return "required"
    default = declared.default()
    if default is MISSING:
        return "derived (see its documentation)"
    if p.placeholder is not None and isinstance(default, str) and len(default) > LONG_DEFAULT:
        return "a built-in text"
    if isinstance(default, dict):
        return "{}" if not default else "{ " + ", ".join(f"{k} = {toml_value(v)}" for k, v in default.items()) + " }"
    shown = toml_value(default)
    return shown if len(shown) <= LONG_DEFAULT else "a built-in text"


def _cell(text: str) -> str:
    """Text safe in a Markdown table cell: one line, pipes escaped, angle brackets not read as HTML."""
    return " ".join(str(text).split()).replace("|", r"\|").replace("<", "&lt;")


def _code_cell(text: str) -> str:
    """Text as a code span in a Markdown table cell (the tables extension splits no cell inside a code span,
    so its pipes stay as they are)."""
    return f"`{' '.join(str(text).split())}`"


def _key_rows(declared_keys) -> list[str]:
    from server.paradigms.params import allowed_values

    rows = ["| key | type | default | allowed | what it means |", "|---|---|---|---|---|"]
    for d in declared_keys:
        default = _default_text(d)
        literal = default not in ("required", "a built-in text") and not default.startswith("derived")
        rows.append(f"| `{d.name}` | {_type_text(d.type)} | {_code_cell(default) if literal else default} "
                    f"| {_cell(allowed_values(d.param))} | {_cell(d.param.doc)} |")
    return rows


def _section_markdown(spec_class: type, section: str, level: str) -> str:
    """One section of a spec as Markdown: its header, its comment and a table of its keys."""
    from server.paradigms.params import declarations, section_docs

    keys = [d for d in declarations(spec_class) if d.param.section == section]
    table = next((d for d in keys if d.param.table is not None), None)
    doc = section_docs(spec_class).get(section, table.param.doc if table is not None else "")
    lines = [f"{level} `[{section}]`", ""]
    if doc:
        lines += [doc.replace("<", "&lt;"), ""]
    if table is not None:
        lines += ["An optional table: every key below may be left out.", ""]
        keys = list(declarations(table.param.table))
    return "\n".join(lines + _key_rows(keys)) + "\n"


def study_file_markdown() -> str:
    """Every section and key of every paradigm's study file, as Markdown.

    A section whose keys, defaults and documentation are the same in every paradigm that has it is shown
    once under "Sections every study file shares"; the others under their paradigm.

    Returns
    -------
    str
        Markdown with ``##`` headers per part and ``###`` per section.
    """
    from server.paradigms import all_paradigms
    from server.paradigms.params import sections

    paradigms = all_paradigms()
    rendered = {p.kind: {s: _section_markdown(p.spec_class, s, "###") for s in sections(p.spec_class)}
                for p in paradigms}
    shared: list[str] = []
    for paradigm in paradigms:
        for section, text in rendered[paradigm.kind].items():
            having = [r for r in rendered.values() if section in r]
            if len(having) == len(paradigms) and all(r[section] == text for r in having) and section not in shared:
                shared.append(section)
    out = ["## Sections every study file shares", "",
           "The same keys, defaults and checks in every paradigm's study file.", ""]
    out += [rendered[paradigms[0].kind][s] for s in shared]
    for paradigm in paradigms:
        out += [f"## {paradigm.title.capitalize()} (`kind = \"{paradigm.kind}\"`)", "",
                f"`perceptlab study template --kind {paradigm.kind}` prints this study file with every key at its "
                "default; the sections shared by every paradigm are listed above.", ""]
        out += [text for section, text in rendered[paradigm.kind].items() if section not in shared]
    return "\n".join(out)


# ---------------------------------------------------------------- the command line

def _help_markdown(text: str) -> str:
    """A click help text as Markdown: paragraphs as text, ``\\b`` blocks (kept as written) as code."""
    out = []
    for paragraph in re.split(r"\n\s*\n", click.unstyle(text or "").strip("\n")):
        lines = paragraph.splitlines()
        if lines and lines[0].strip() == "\b":
            body = "\n".join(lines[1:])
            indent = min((len(line) - len(line.lstrip()) for line in lines[1:] if line.strip()), default=0)
            out.append("```text\n" + "\n".join(line[indent:] for line in body.splitlines()) + "\n```")
        else:
            out.append(" ".join(paragraph.split()).replace("<", "&lt;"))
    return "\n\n".join(out)


def _commands(group: click.Group, ctx: click.Context) -> list[tuple[list[str], click.Command, click.Context]]:
    """Every command under ``group`` depth first, by name: (its words after ``perceptlab``, it, its context)."""
    found = []
    for name in sorted(group.list_commands(ctx)):
        command = group.get_command(ctx, name)
        if command is None or command.hidden:
            continue
        sub = click.Context(command, info_name=name, parent=ctx)
        found.append(([*ctx.command_path.split()[1:], name], command, sub))
        if isinstance(command, click.Group):
            found += _commands(command, sub)
    return found


def _command_markdown(words: list[str], command: click.Command, ctx: click.Context) -> str:
    level = "#" * min(max(len(words), 1) + 1, 4)  # the group and its commands ##, subcommands ###
    usage = " ".join(["perceptlab", *words, *command.collect_usage_pieces(ctx)])
    lines = [f"{level} `perceptlab {' '.join(words)}`", "", f"```text\n{usage}\n```", "",
             _help_markdown(command.help or command.short_help or ""), ""]
    records = [p.get_help_record(ctx) for p in command.get_params(ctx) if isinstance(p, click.Option)]
    records = [r for r in records if r is not None]
    if records:
        lines += ["| option | what it does |", "|---|---|"]
        lines += [f"| {_code_cell(opts)} | {_cell(help_text)} |" for opts, help_text in records]
        lines.append("")
    if isinstance(command, click.Group):
        lines += ["Commands: " + ", ".join(f"`{name}`" for name in sorted(command.list_commands(ctx))), ""]
    return "\n".join(lines)


def cli_markdown() -> str:
    """Every command and option of ``perceptlab`` with its help, as Markdown (``##`` per command).

    Returns
    -------
    str
        The top-level group's help and options, then each command depth first.
    """
    from server.cli import cli

    root = click.Context(cli, info_name="perceptlab")
    parts = [_command_markdown([], cli, root).replace("`perceptlab `", "`perceptlab`", 1)]
    parts += [_command_markdown(words, command, ctx) for words, command, ctx in _commands(cli, root)]
    return "\n".join(parts)


# ---------------------------------------------------------------- the MkDocs hook

GENERATORS: dict[str, Callable[[], str]] = {"study-file": study_file_markdown, "cli": cli_markdown}


def on_page_markdown(markdown: str, page: Any = None, config: Any = None, files: Any = None) -> str:
    """MkDocs hook: each ``<!-- generated: NAME -->`` line of a page becomes :data:`GENERATORS` [NAME]'s output.

    Raises
    ------
    KeyError
        A marker names no generator (the build stops instead of publishing a page with a hole).
    """
    return MARKER.sub(lambda match: GENERATORS[match.group(1)]().rstrip("\n"), markdown)
