"""The remote-desktop hint: cues of a remote or virtual session that the browser reports with its environment
(``POST /environment``'s ``display``, :func:`clean_display_cues`), for every paradigm.

The cues: a colour depth below 24 bits (remote-desktop and VNC sessions often run at 16), ``prefers-reduced-motion``
(remote-desktop clients turn animations off, which Windows then reports), a software or virtual-machine WebGL
renderer. Each is common on ordinary machines too (reduced motion is an accessibility setting), so the hint is
only recorded (workers.csv ``remote_desktop_hint``: the cues that fired, :func:`remote_desktop_cues`), never a
reason to refuse anyone.
"""
from __future__ import annotations

import re
from typing import Any

from .. import validation as check
from ..errors import invalid, reject_unknown

RENDERER_LENGTH = 200
# WebGL renderers of software rasterisers and virtual machines' display adapters: what a remote or virtual
# session typically draws with (a real GPU names its vendor and model).
VIRTUAL_RENDERER = re.compile(r"SwiftShader|llvmpipe|softpipe|Basic Render|VMware|VirtualBox|Parallels|Citrix|"
                              r"Hyper-V|QXL|virgl|Remote", re.IGNORECASE)


def clean_display_cues(value: Any) -> dict[str, Any] | None:
    """The remote-desktop cues of ``POST /environment``'s ``display`` member, validated (absent: None).

    Raises
    ------
    ApiError
        400 naming the member.
    """
    if value is None:
        return None
    if not isinstance(value, dict):
        raise invalid("display must be an object")
    reject_unknown(value, ("color_depth", "reduced_motion", "forced_colors", "renderer"))
    renderer = check.text(value.get("renderer"), "display.renderer", max_length=1 << 12)
    return {"color_depth": check.integer(value.get("color_depth"), "display.color_depth", 1, 64, required=False),
            "reduced_motion": _flag(value, "reduced_motion"), "forced_colors": _flag(value, "forced_colors"),
            "renderer": renderer[:RENDERER_LENGTH] if renderer is not None else None}


def _flag(value: dict, name: str) -> bool | None:
    flag = value.get(name)
    if flag is not None and not isinstance(flag, bool):
        raise invalid(f"display.{name} must be true or false")
    return flag


def remote_desktop_cues(environment: dict[str, Any] | None) -> list[str]:
    """The cues of a remote or virtual session in a stored environment: ``low_colour_depth`` (below 24 bits),
    ``reduced_motion``, ``virtual_renderer`` (:data:`VIRTUAL_RENDERER`). A hint only, never a refusal."""
    cues = (environment or {}).get("display") or {}
    found = []
    if cues.get("color_depth") is not None and cues["color_depth"] < 24:
        found.append("low_colour_depth")
    if cues.get("reduced_motion"):
        found.append("reduced_motion")
    if cues.get("renderer") and VIRTUAL_RENDERER.search(cues["renderer"]):
        found.append("virtual_renderer")
    return found
