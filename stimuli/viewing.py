"""Images of the viewing-condition checks (``[viewing]``; the server draws what each shows and scores the
answers: server/paradigms/viewing.py). Pure numpy and Pillow, no server code.

- :func:`brightness_patch`: a flat grey patch with shapes a few grey levels from it (the P.910 manner:
  count the shapes, in a dark and in a bright patch);
- :func:`colour_plate`: a pseudo-isochromatic plate made here (dots of random sizes, a digit in colours that
  differ along one dichromat's confusion line, each dot's luminance jittered); no published plate is copied;
- :func:`landolt_c`: a Landolt C of a given gap in device pixels, in one of :data:`GAP_DIRECTIONS`.

Every image is written by :func:`stored_png`: a PNG whose deflate stream is stored, not compressed, so its
size depends on its width, height and mode only, and the file's size says nothing of what it shows.
"""
from __future__ import annotations

import io
import math

import numpy as np
from PIL import Image, ImageDraw

# Where a Landolt C's gap may point (the worker's answer is one of these).
GAP_DIRECTIONS = ("up", "right", "down", "left")
# The digits plates show: all ten seven-segment digits but 0 and 1 (1 is two thin strokes; 0 and 8 differ by one).
PLATE_DIGITS = (2, 3, 4, 5, 6, 7, 8, 9)
# The confusion lines a plate's figure and ground may differ along: the protan's (only the L cones differ)
# and the deutan's (only the M cones differ).
CONFUSION_LINES = ("protan", "deutan")

# Seven-segment digits: segments a (top), b (top right), c (bottom right), d (bottom), e (bottom left),
# f (top left), g (middle).
_SEGMENTS = {0: "abcdef", 1: "bc", 2: "abdeg", 3: "abcdg", 4: "bcfg", 5: "acdfg", 6: "acdefg", 7: "abc",
             8: "abcdefg", 9: "abcdfg"}

# sRGB (linear) -> LMS cone excitations, Hunt-Pointer-Estevez (D65-normalised), and back.
_RGB_TO_LMS = np.array([[0.31399022, 0.63951294, 0.04649755],
                        [0.15537241, 0.75789446, 0.08670142],
                        [0.01775239, 0.10944209, 0.87256922]])
_LMS_TO_RGB = np.linalg.inv(_RGB_TO_LMS)
# The plate's mean colour (sRGB): a mid grey-orange whose cone excitations leave room on both sides of each line.
PLATE_BASE_SRGB = (176, 150, 120)
PLATE_CONTRAST = 0.09      # figure and ground: the line's cone excitation 9 % above and below the base
PLATE_JITTER = 0.14        # each dot's luminance scaled by a factor in [1 - 0.14, 1 + 0.14]: no brightness cue


def stored_png(pixels: np.ndarray) -> bytes:
    """``pixels`` (uint8, H x W grey or H x W x 3) as a PNG without compression (zlib level 0): two images of
    one shape and mode give files of one size."""
    buffer = io.BytesIO()
    Image.fromarray(np.ascontiguousarray(pixels, dtype=np.uint8)).save(buffer, format="PNG", compress_level=0)
    return buffer.getvalue()


# ---------------------------------------------------------------- brightness and contrast

def brightness_patch(count: int, *, background: int, delta: int, size: int, rng: np.random.Generator) -> np.ndarray:
    """A ``size`` x ``size`` grey patch at ``background`` with ``count`` shapes (circles, squares, triangles) at
    ``background + delta`` (a negative ``delta``: darker shapes), one per cell of a 3 x 3 grid, jittered.

    Parameters
    ----------
    count
        Shapes drawn, 0 to 9.
    background, delta
        Grey levels (0-255): the patch's, and the shapes' difference from it.
    size
        Side of the patch in pixels.
    rng
        Where the shapes go and which they are.
    """
    if not 0 <= count <= 9:
        raise ValueError(f"a patch holds 0 to 9 shapes, not {count}")
    image = Image.new("L", (size, size), int(background))
    draw = ImageDraw.Draw(image)
    cell = size / 3
    radius = cell * 0.28
    level = int(np.clip(background + delta, 0, 255))
    for index in rng.choice(9, size=count, replace=False):
        row, column = divmod(int(index), 3)
        cx = (column + 0.5) * cell + rng.uniform(-0.12, 0.12) * cell
        cy = (row + 0.5) * cell + rng.uniform(-0.12, 0.12) * cell
        shape = rng.integers(3)
        box = (cx - radius, cy - radius, cx + radius, cy + radius)
        if shape == 0:
            draw.ellipse(box, fill=level)
        elif shape == 1:
            draw.rectangle(box, fill=level)
        else:
            draw.polygon([(cx, cy - radius), (cx + radius, cy + radius), (cx - radius, cy + radius)], fill=level)
    return np.asarray(image)


# ---------------------------------------------------------------- colour vision

def _linear(srgb: np.ndarray) -> np.ndarray:
    c = srgb / 255.0
    return np.where(c <= 0.04045, c / 12.92, ((c + 0.055) / 1.055) ** 2.4)


def _encoded(linear: np.ndarray) -> np.ndarray:
    c = np.clip(linear, 0.0, 1.0)
    return np.round(255 * np.where(c <= 0.0031308, 12.92 * c, 1.055 * c ** (1 / 2.4) - 0.055))


def plate_colours(line: str, contrast: float = PLATE_CONTRAST) -> tuple[np.ndarray, np.ndarray]:
    """The figure's and the ground's linear-RGB colours of a plate along ``line``: the base colour's L (protan)
    or M (deutan) cone excitation raised and lowered by ``contrast``, the other cones unchanged, so a dichromat
    missing those cones sees both alike."""
    cone = CONFUSION_LINES.index(line)  # 0: L, 1: M
    base = _RGB_TO_LMS @ _linear(np.asarray(PLATE_BASE_SRGB, dtype=float))
    figure, ground = base.copy(), base.copy()
    figure[cone] *= 1 + contrast
    ground[cone] *= 1 - contrast
    return _LMS_TO_RGB @ figure, _LMS_TO_RGB @ ground


def digit_mask(digit: int, size: int) -> np.ndarray:
    """A boolean ``size`` x ``size`` mask of ``digit`` in thick seven-segment strokes, centred."""
    image = Image.new("L", (size, size), 0)
    draw = ImageDraw.Draw(image)
    width, height, stroke = 0.44 * size, 0.62 * size, 0.15 * size
    left, top = (size - width) / 2, (size - height) / 2
    right, bottom, middle = left + width, top + height, top + height / 2
    bars = {"a": (left, top, right, top + stroke), "d": (left, bottom - stroke, right, bottom),
            "g": (left, middle - stroke / 2, right, middle + stroke / 2),
            "f": (left, top, left + stroke, middle), "e": (left, middle, left + stroke, bottom),
            "b": (right - stroke, top, right, middle), "c": (right - stroke, middle, right, bottom)}
    for segment in _SEGMENTS[digit]:
        draw.rectangle(bars[segment], fill=255)
    return np.asarray(image) > 0


def colour_plate(digit: int, line: str, *, size: int, rng: np.random.Generator) -> np.ndarray:
    """A pseudo-isochromatic plate (``size`` x ``size`` sRGB): dots of random radii packed in a disc on white;
    a dot whose centre lies on ``digit``'s strokes takes the figure's colour, the others the ground's (both
    from :func:`plate_colours` along ``line``), each with its luminance scaled by a random factor so that
    brightness alone shows no digit."""
    mask = digit_mask(digit, size)
    figure, ground = plate_colours(line)
    centre, disc = size / 2, size / 2 - 2
    r_low, r_high = size * 0.010, size * 0.028
    placed: list[tuple[float, float, float]] = []
    xy = np.zeros((0, 2))
    radii = np.zeros(0)
    for _ in range(size * 30):
        r = rng.uniform(r_low, r_high)
        angle, reach = rng.uniform(0, 2 * math.pi), disc * math.sqrt(rng.uniform())
        x, y = centre + reach * math.cos(angle), centre + reach * math.sin(angle)
        if math.hypot(x - centre, y - centre) + r > disc:
            continue
        if len(radii) and np.any(np.hypot(xy[:, 0] - x, xy[:, 1] - y) < radii + r + 0.8):
            continue
        placed.append((x, y, r))
        xy = np.vstack([xy, (x, y)])
        radii = np.append(radii, r)
    image = Image.new("RGB", (size, size), (255, 255, 255))
    draw = ImageDraw.Draw(image)
    for x, y, r in placed:
        inside = mask[min(size - 1, int(y)), min(size - 1, int(x))]
        colour = (figure if inside else ground) * rng.uniform(1 - PLATE_JITTER, 1 + PLATE_JITTER)
        draw.ellipse((x - r, y - r, x + r, y + r), fill=tuple(int(v) for v in _encoded(colour)))
    return np.asarray(image)


# ---------------------------------------------------------------- acuity

def landolt_c(gap_px: float, direction: str, *, canvas_px: int, supersample: int = 8) -> np.ndarray:
    """A black Landolt C on white (grey, ``canvas_px`` square, centred): outer diameter 5 gaps, stroke and gap
    one gap wide (ISO 8596), the gap towards ``direction``; edges area-averaged over ``supersample``² samples
    per pixel, so a C of a few pixels keeps its shape."""
    if direction not in GAP_DIRECTIONS:
        raise ValueError(f"direction must be one of {GAP_DIRECTIONS}, not {direction!r}")
    if canvas_px < 5 * gap_px:
        raise ValueError("the canvas is smaller than the C")
    n = canvas_px * supersample
    coords = (np.arange(n) + 0.5) / supersample - canvas_px / 2
    x, y = np.meshgrid(coords, coords)  # y grows downwards, as on screen
    # Turn the sample grid so that the gap always opens towards +x in the turned frame.
    turns = {"right": (x, y), "down": (y, -x), "left": (-x, -y), "up": (-y, x)}
    u, v = turns[direction]
    r = np.hypot(u, v)
    ring = (r <= 2.5 * gap_px) & (r >= 1.5 * gap_px)
    gap = (u > 0) & (np.abs(v) < gap_px / 2)
    ink = (ring & ~gap).reshape(canvas_px, supersample, canvas_px, supersample).mean(axis=(1, 3))
    return np.round(255 * (1 - ink)).astype(np.uint8)
