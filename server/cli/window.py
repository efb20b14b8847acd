"""The window a study's pages need, as ``stimuli prepare``, ``study create``, ``launch`` and ``study show``
say it (:mod:`server.paradigms.display`): one line, and the refusal of a study that a laptop cannot show."""
from __future__ import annotations

from pathlib import Path

from .base import UserError

ALLOW_OPTION_HELP = ("Create the study even though its pages need a browser window larger than a 1366x768 "
                     "laptop's (1366 x 657 CSS px inside): workers with smaller windows are turned away before consent.")


def requirement_of(spec):
    """The :class:`~server.paradigms.display.WindowRequirement` of a spec, from its paradigm."""
    from server.paradigms import paradigm_of_spec

    return paradigm_of_spec(spec).requirement_of_spec(spec)


def window_line(requirement) -> str:
    """"window needed: 1212 x 571 CSS px (fit: ...); fits a 1366 x 657 laptop window"."""
    from server.paradigms.display import LAPTOP_WINDOW

    laptop = f"{LAPTOP_WINDOW[0]} x {LAPTOP_WINDOW[1]}"
    verdict = (f"fits a {laptop} laptop window" if requirement.fits()
               else f"LARGER than a {laptop} laptop window (1366x768 screen)")
    return f"window needed: {requirement.describe()}; {verdict}"


def check_window(spec, allow_large_window: bool, where: str) -> str:
    """The :func:`window_line` of ``spec``; a :class:`UserError` when a laptop's window is too small for it
    and ``allow_large_window`` is false (``where``: the study file, for the message)."""
    requirement = requirement_of(spec)
    if not requirement.fits() and not allow_large_window:
        w, h = requirement.min_window
        scenes = "; ".join(f"{name} {need[0]} x {need[1]}" for name, need in requirement.too_large)
        raise UserError(
            f"{where}: the study's pages need a browser window of at least {w} x {h} CSS px ({requirement.describe()}), "
            f"more than the 1366 x 657 of a 1366x768 laptop{f' (scenes: {scenes})' if scenes else ''}, so many "
            f"workers would be turned away; show smaller "
            f"images (downscale the scenes, or fewer or smaller zoom regions: stimuli prepare --top-k/--zoom), "
            + ('choose a lower [display] min_image_scale' if requirement.policy == "fit"
               else 'choose [display] policy = "fit" or a lower min_image_scale')
            + ", or pass --allow-large-window to create it anyway")
    return window_line(requirement)


def prepared_window_lines(manifest: Path) -> list[str]:
    """What prepared stimuli need under each display policy with the study template's other [display]
    values (``stimuli prepare``, which prepares the stimuli of the default kind, paired comparison: its
    paradigm is asked through the registry, by its spec and :meth:`~server.paradigms.core.Paradigm.requirement_of_spec`)."""
    from server.paradigms import DEFAULT_KIND, paradigm_named
    from server.paradigms.display import POLICIES

    paradigm = paradigm_named(DEFAULT_KIND)
    lines = []
    for policy in POLICIES:
        # The manifest's name, relative to its folder: a relative --out is not joined to itself.
        spec = paradigm.spec_class(slug="prepared", name="prepared", manifests=(manifest.name,), policy=policy,
                                   base_dir=str(manifest.parent.absolute()))
        lines.append(f"  [display] policy = \"{policy}\": {window_line(paradigm.requirement_of_spec(spec))}")
    return lines
