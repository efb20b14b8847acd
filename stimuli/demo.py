"""Demo dataset: synthetic scenes with known motion, interpolated by real flow methods.

Each scene is three frames (times 0, 0.5, 1) rendered from images that
scikit-image ships (no network): a background image under a camera motion
(translation plus a slight zoom) and, in front of it, a textured foreground
object (a disc or a star-shaped polygon cut from another image) with its own
translation and zoom, so the object occludes and disoccludes background.
Every scene point moves on a straight line at constant speed, so the true
middle frame and the true flow from frame 0 to frame 2 are exact.

The "methods" of a scene are flow fields estimated from frame 0 to frame 2
(OpenCV Farneback and DIS settings, zero flow, the true flow, ...), each
turned into a middle frame with the Middlebury baseline interpolation
(:func:`stimuli.interpolate.interpolate_frame`). :func:`build_demo` writes::

    OUT/demo.json                      build parameters and per-method flow/frame errors
    OUT/scenes/<scene>/reference.png   the true middle frame
    OUT/scenes/<scene>/<method>.png    one interpolated middle frame per method
    OUT/scenes/<scene>/source/         frame_0.png, frame_1.png (= reference), frame_2.png,
                                       true_flow.flo (frame 0 -> frame 2), scene.json
    OUT/prepared/                      stimuli.prepare.prepare_study of OUT/scenes:
                                       amplified images, zoom crops, pair designs, manifest.json

Candidates lie beside ``reference.png`` because that is the scene-folder
layout :func:`stimuli.prepare.load_scene` reads (subfolders are ignored).
"""
from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import numpy as np
from scipy import ndimage

from .prepare import staged_output

SeedLike = int | np.random.Generator | None

#: Bundled scikit-image pictures (no download) used as backgrounds, in order of preference.
BACKGROUND_IMAGES = ("coffee", "rocket", "chelsea", "astronaut", "immunohistochemistry")
#: Bundled pictures whose texture fills the foreground objects.
FOREGROUND_IMAGES = ("astronaut", "chelsea", "coffee", "rocket", "immunohistochemistry", "brick", "gravel")

DEFAULT_SIZE = (320, 240)
MIN_SIDE, MAX_SIDE = 48, 4096


# --------------------------------------------------------------------------- scene model

@dataclass(frozen=True)
class LayerMotion:
    """Motion of one layer from frame 0 (``s = 0``) to frame 2 (``s = 1``).

    A point at ``X`` in frame 0 is at ``X + s * (zoom * (X - centre) + shift)``
    at time ``s``: straight lines at constant speed, so linear interpolation
    in time is exact.
    """

    shift: tuple[float, float]
    zoom: float
    centre: tuple[float, float]

    def displacement(self, x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Flow (frame 0 -> frame 2) of the frame-0 points ``(x, y)``."""
        return (self.zoom * (x - self.centre[0]) + self.shift[0],
                self.zoom * (y - self.centre[1]) + self.shift[1])

    def to_frame0(self, x: np.ndarray, y: np.ndarray, s: float) -> tuple[np.ndarray, np.ndarray]:
        """Frame-0 position of the layer point seen at ``(x, y)`` at time ``s``."""
        scale = 1.0 + s * self.zoom
        cx, cy = self.centre
        return (cx + (x - cx - s * self.shift[0]) / scale,
                cy + (y - cy - s * self.shift[1]) / scale)


@dataclass(frozen=True)
class SceneSpec:
    """Everything needed to render one scene (all positions in frame-0 pixels)."""

    name: str
    size: tuple[int, int]
    background: str
    foreground: str
    background_motion: LayerMotion
    foreground_motion: LayerMotion
    polygon: np.ndarray  # (n, 2) outline of the foreground object in frame 0
    shape_kind: str
    texture_offset: tuple[float, float]  # texture pixel of frame-0 point (0, 0), resized texture


@dataclass
class RenderedScene:
    """Three frames, the true flow from frame 0 to frame 2 and the object masks."""

    spec: SceneSpec
    frames: tuple[np.ndarray, np.ndarray, np.ndarray]  # uint8 RGB at s = 0, 0.5, 1
    true_flow: np.ndarray  # (H, W, 2) float32
    foreground_masks: tuple[np.ndarray, np.ndarray, np.ndarray]


@dataclass
class DemoResult:
    """What :func:`build_demo` made."""

    path: Path
    scenes: list[str]
    methods: list[str]
    seconds: float
    manifest: dict | None = None  # top-level manifest of OUT/prepared (None when not prepared)
    metrics: dict[str, dict[str, dict[str, float | None]]] = field(default_factory=dict)


@lru_cache(maxsize=None)
def _bundled_image(name: str) -> np.ndarray:
    """RGB float64 copy of a picture bundled with scikit-image (never downloads)."""
    import skimage.data

    image = np.asarray(getattr(skimage.data, name)())
    if image.ndim == 2:
        image = np.repeat(image[:, :, None], 3, axis=2)
    return image[:, :, :3].astype(np.float64)


@lru_cache(maxsize=32)
def _prefiltered(name: str, scale: float) -> np.ndarray:
    """Bundled image resized by ``scale`` and cubic-spline prefiltered for exact sampling."""
    import cv2

    image = _bundled_image(name)
    height, width = image.shape[:2]
    size = (max(4, round(width * scale)), max(4, round(height * scale)))
    resized = cv2.resize(image, size, interpolation=cv2.INTER_AREA if scale < 1 else cv2.INTER_CUBIC)
    return np.stack([ndimage.spline_filter(resized[..., c], order=3, mode="mirror")
                     for c in range(3)], axis=-1)


def _sample(coefficients: np.ndarray, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Cubic-spline samples of a prefiltered image at real positions (exact, no table)."""
    coords = np.stack([y.ravel(), x.ravel()])
    channels = [ndimage.map_coordinates(coefficients[..., c], coords, order=3, mode="mirror",
                                        prefilter=False) for c in range(coefficients.shape[2])]
    return np.stack(channels, axis=-1).reshape(*x.shape, -1)


def _background_scale(spec: SceneSpec) -> float:
    # Resize factor of the background picture: it covers the frame with a 30 %
    # margin for the camera motion, one picture pixel per frame pixel.
    height, width = _bundled_image(spec.background).shape[:2]
    return 1.3 * max(spec.size[0] / width, spec.size[1] / height)


def _texture_scale(spec: SceneSpec) -> float:
    # Resize factor of the texture picture: the object spans about a third of
    # its short side, so the object shows a recognisable part of the picture.
    height, width = _bundled_image(spec.foreground).shape[:2]
    extent = np.ptp(spec.polygon, axis=0).max()
    return 3.0 * extent / min(height, width)


def _inside_polygon(polygon: np.ndarray, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    from skimage.measure import points_in_poly

    points = np.column_stack([x.ravel(), y.ravel()])
    return points_in_poly(points, polygon).reshape(x.shape)


def render_scene(spec: SceneSpec) -> RenderedScene:
    """Render the frames at ``s = 0, 0.5, 1`` and the exact flow from frame 0 to frame 2."""
    width, height = spec.size
    ys, xs = np.indices((height, width), dtype=np.float64)
    background = _prefiltered(spec.background, _background_scale(spec))
    texture = _prefiltered(spec.foreground, _texture_scale(spec))
    # Background pixel of frame-0 point X: centred, one picture pixel per frame pixel.
    bg_origin = (np.array(background.shape[1::-1]) - 1) / 2 - (np.array(spec.size) - 1) / 2
    frames, masks = [], []
    for s in (0.0, 0.5, 1.0):
        bx, by = spec.background_motion.to_frame0(xs, ys, s)
        fx, fy = spec.foreground_motion.to_frame0(xs, ys, s)
        # Hard mask at pixel centres: every pixel belongs to exactly one layer,
        # so the true flow below is exact for every pixel, edges included.
        inside = _inside_polygon(spec.polygon, fx, fy)
        colour = _sample(background, bg_origin[0] + bx, bg_origin[1] + by)
        colour[inside] = _sample(texture, spec.texture_offset[0] + fx[inside],
                                 spec.texture_offset[1] + fy[inside])
        frames.append(np.clip(np.rint(colour), 0, 255).astype(np.uint8))
        masks.append(inside)
    flow = np.stack(spec.background_motion.displacement(xs, ys), axis=-1)
    flow[masks[0]] = np.stack(spec.foreground_motion.displacement(xs, ys), axis=-1)[masks[0]]
    return RenderedScene(spec=spec, frames=tuple(frames), true_flow=flow.astype(np.float32),
                         foreground_masks=tuple(masks))


def _object_outline(rng: np.random.Generator, centre: np.ndarray, radius: float) -> tuple[str, np.ndarray]:
    if rng.random() < 0.5:
        angles = np.linspace(0, 2 * np.pi, 96, endpoint=False)
        radii = np.full(angles.shape, radius)
        kind = "disc"
    else:
        n_vertices = int(rng.integers(5, 10))
        angles = np.sort(rng.uniform(0, 2 * np.pi, n_vertices))
        radii = radius * rng.uniform(0.6, 1.0, n_vertices)
        kind = "polygon"
    outline = centre + np.column_stack([radii * np.cos(angles), radii * np.sin(angles)])
    return kind, outline


def random_scene(index: int, size: tuple[int, int], rng: np.random.Generator,
                 background: str, foreground: str) -> SceneSpec:
    """Draw the motions and the object of one scene.

    Motions are scaled with the frame size (figures below are for 240 px on
    the short side): camera shift 3-10 px and zoom within +-4 % between frame 0
    and frame 2; object shift 10-22 px in a direction at least 90 degrees away
    from the camera's, zoom within +-6 %, radius 16-24 % of the short side.
    """
    width, height = size
    unit = min(width, height) / 240.0
    frame_centre = np.array([(width - 1) / 2, (height - 1) / 2])

    bg_angle = rng.uniform(0, 2 * np.pi)
    bg_shift = rng.uniform(3, 10) * unit * np.array([np.cos(bg_angle), np.sin(bg_angle)])
    bg_motion = LayerMotion(shift=tuple(bg_shift), zoom=float(rng.uniform(-0.04, 0.04)),
                            centre=tuple(frame_centre))

    fg_angle = bg_angle + rng.uniform(np.pi / 2, 3 * np.pi / 2)
    fg_shift = rng.uniform(10, 22) * unit * np.array([np.cos(fg_angle), np.sin(fg_angle)])
    radius = rng.uniform(0.16, 0.24) * min(width, height)
    # Start so that the object's path is centred near the middle of the frame.
    centre = frame_centre + rng.uniform(-0.15, 0.15, 2) * np.array(size) - fg_shift / 2
    kind, outline = _object_outline(rng, centre, radius)
    fg_motion = LayerMotion(shift=tuple(fg_shift), zoom=float(rng.uniform(-0.06, 0.06)),
                            centre=tuple(centre))

    spec = SceneSpec(name=f"scene_{index + 1:02d}_{background}", size=size, background=background,
                     foreground=foreground, background_motion=bg_motion, foreground_motion=fg_motion,
                     polygon=outline, shape_kind=kind, texture_offset=(0.0, 0.0))
    # Centre the object on a random part of the (resized) texture picture.
    tex_height, tex_width = _prefiltered(foreground, _texture_scale(spec)).shape[:2]
    reach = 1.1 * np.abs(outline - centre).max()
    target = np.array([rng.uniform(reach, max(reach, tex_width - 1 - reach)),
                       rng.uniform(reach, max(reach, tex_height - 1 - reach))])
    offset = target - centre
    return dataclasses.replace(spec, texture_offset=(float(offset[0]), float(offset[1])))


# --------------------------------------------------------------------------- methods

FlowMethod = Callable[[RenderedScene], np.ndarray]


def _gray(frame: np.ndarray) -> np.ndarray:
    import cv2

    return cv2.cvtColor(frame, cv2.COLOR_RGB2GRAY)


def _farneback(pyr_scale: float, levels: int, winsize: int, iterations: int, poly_n: int,
               poly_sigma: float, gaussian: bool = False) -> FlowMethod:
    def estimate(scene: RenderedScene) -> np.ndarray:
        import cv2

        flags = cv2.OPTFLOW_FARNEBACK_GAUSSIAN if gaussian else 0
        return cv2.calcOpticalFlowFarneback(_gray(scene.frames[0]), _gray(scene.frames[2]), None,
                                            pyr_scale, levels, winsize, iterations, poly_n,
                                            poly_sigma, flags)
    return estimate


def _dis(preset: str, refinement_iterations: int | None = None) -> FlowMethod:
    def estimate(scene: RenderedScene) -> np.ndarray:
        import cv2

        dis = cv2.DISOpticalFlow_create(getattr(cv2, f"DISOPTICAL_FLOW_PRESET_{preset}"))
        if refinement_iterations is not None:
            dis.setVariationalRefinementIterations(refinement_iterations)
        return dis.calc(_gray(scene.frames[0]), _gray(scene.frames[2]), None)
    return estimate


def _true_flow(scene: RenderedScene) -> np.ndarray:
    return scene.true_flow


def _zero_flow(scene: RenderedScene) -> np.ndarray:
    return np.zeros_like(scene.true_flow)


def _smoothed_true_flow(scene: RenderedScene) -> np.ndarray:
    # Over-smoothing across motion boundaries, the classic failure of global methods.
    sigma = 4.0 * min(scene.spec.size) / 240.0
    return ndimage.gaussian_filter(scene.true_flow, (sigma, sigma, 0), mode="nearest")


def _background_motion(scene: RenderedScene) -> np.ndarray:
    # A single global (camera) motion: right on the background, wrong on the object.
    height, width = scene.true_flow.shape[:2]
    ys, xs = np.indices((height, width), dtype=np.float64)
    return np.stack(scene.spec.background_motion.displacement(xs, ys), axis=-1).astype(np.float32)


#: Every available method, by name (the candidate file is ``<name>.png``).
METHODS: dict[str, FlowMethod] = {
    "true_flow": _true_flow,
    "zero_flow": _zero_flow,
    "farneback_coarse": _farneback(0.5, 1, 5, 1, 5, 1.1),
    "farneback_default": _farneback(0.5, 3, 15, 3, 5, 1.2),
    "farneback_wide": _farneback(0.5, 5, 31, 5, 7, 1.5, gaussian=True),
    "dis_ultrafast": _dis("ULTRAFAST"),
    "dis_ultrafast_refined": _dis("ULTRAFAST", 5),
    "dis_fast": _dis("FAST"),
    "dis_fast_unrefined": _dis("FAST", 0),
    "dis_medium": _dis("MEDIUM"),
    "dis_medium_unrefined": _dis("MEDIUM", 0),
    "true_flow_smoothed": _smoothed_true_flow,
    "background_motion": _background_motion,
}
#: The methods a demo uses unless told otherwise (11 per scene).
DEFAULT_METHODS = tuple(name for name in METHODS if name not in ("true_flow_smoothed", "background_motion"))


def resolve_methods(methods: Sequence[str] | str | None) -> list[str]:
    """Method names to use: ``None`` = :data:`DEFAULT_METHODS`, ``"all"`` = every one."""
    if methods is None:
        return list(DEFAULT_METHODS)
    if isinstance(methods, str):
        methods = list(METHODS) if methods == "all" else [m.strip() for m in methods.split(",") if m.strip()]
    unknown = [m for m in methods if m not in METHODS]
    if unknown:
        raise ValueError(f"methods: unknown {', '.join(unknown)}; available: {', '.join(METHODS)}")
    if len(set(methods)) != len(methods) or len(methods) < 2:
        raise ValueError(f"methods: need at least 2 distinct methods, got {list(methods)}")
    return list(methods)


# --------------------------------------------------------------------------- building

SCENES_DIR, PREPARED_DIR, DEMO_JSON = "scenes", "prepared", "demo.json"


def _psnr(reference: np.ndarray, image: np.ndarray) -> float | None:
    mse = np.mean((reference.astype(np.float64) - image.astype(np.float64)) ** 2)
    return None if mse == 0 else round(float(10 * np.log10(255.0 ** 2 / mse)), 3)  # None: identical


def _json_bytes(data: dict) -> bytes:
    return (json.dumps(data, indent=2, allow_nan=False) + "\n").encode()


def _motion_dict(motion: LayerMotion) -> dict:
    return {"shift": [round(v, 6) for v in motion.shift], "zoom": round(motion.zoom, 6),
            "centre": [round(v, 6) for v in motion.centre]}


def _write_scene(folder: Path, scene: RenderedScene, candidates: dict[str, np.ndarray],
                 metrics: dict[str, dict[str, float | None]], seed_info: object) -> None:
    from .flow_io import write_flo
    from .io import write_bytes_atomic, write_png

    (folder / "source").mkdir(parents=True)
    write_png(folder / "reference.png", scene.frames[1])
    for name, image in candidates.items():
        write_png(folder / f"{name}.png", image)
    for index, frame in enumerate(scene.frames):
        write_png(folder / "source" / f"frame_{index}.png", frame)
    write_flo(folder / "source" / "true_flow.flo", scene.true_flow)
    spec = scene.spec
    description = {
        "name": spec.name,
        "size": list(spec.size),
        "seed": seed_info,
        "background_image": f"skimage.data.{spec.background}",
        "foreground_image": f"skimage.data.{spec.foreground}",
        "foreground_shape": spec.shape_kind,
        "background_motion": _motion_dict(spec.background_motion),
        "foreground_motion": _motion_dict(spec.foreground_motion),
        "flow": "frame_0 -> frame_2 in pixels, u right, v down; reference = frame_1 (t = 0.5)",
        "interpolation": "stimuli.interpolate.interpolate_frame (Middlebury baseline), t = 0.5",
        "methods": metrics,
    }
    write_bytes_atomic(folder / "source" / "scene.json", _json_bytes(description))


def build_scene(folder: Path, spec: SceneSpec, methods: Sequence[str], seed_info: object = None,
                on_method: Callable[[], None] | None = None) -> dict[str, dict[str, float | None]]:
    """Render ``spec``, run and interpolate every method, write the scene folder.

    Returns per-method metrics: mean endpoint error of the flow against the
    truth (``epe``, pixels) and PSNR of the interpolated frame against the
    true middle frame (``psnr``, dB; ``None`` when identical).
    """
    from .interpolate import interpolate_frame

    scene = render_scene(spec)
    candidates, metrics = {}, {}
    for name in methods:
        flow = np.asarray(METHODS[name](scene), dtype=np.float32)
        frame = interpolate_frame(scene.frames[0], scene.frames[2], flow, 0.5).frame
        candidates[name] = frame
        epe = np.hypot(*np.moveaxis(flow - scene.true_flow, -1, 0)).mean()
        metrics[name] = {"epe": round(float(epe), 4), "psnr": _psnr(scene.frames[1], frame)}
        if on_method is not None:
            on_method()
    _write_scene(folder, scene, candidates, metrics, seed_info)
    return metrics


def _check_size(size: tuple[int, int]) -> tuple[int, int]:
    if len(size) != 2 or not all(int(v) == v and MIN_SIDE <= v <= MAX_SIDE for v in size):
        raise ValueError(f"size: width and height must be integers in {MIN_SIDE}..{MAX_SIDE}, got {size}")
    return int(size[0]), int(size[1])


def parse_size(text: str) -> tuple[int, int]:
    """``"320x240"`` -> ``(320, 240)`` (width, height)."""
    parts = text.lower().replace("×", "x").split("x")
    try:
        size = tuple(int(p) for p in parts)
    except ValueError:
        size = ()
    if len(size) != 2:
        raise ValueError(f"size: expected WIDTHxHEIGHT such as 320x240, got {text!r}")
    return _check_size(size)


def scene_specs(n_scenes: int, size: tuple[int, int], seed: SeedLike) -> list[SceneSpec]:
    """The scenes of a demo; with an integer seed, scene ``i`` depends only on ``seed`` and ``i``."""
    if int(n_scenes) != n_scenes or n_scenes < 1:
        raise ValueError(f"scenes: need a positive integer, got {n_scenes}")
    size = _check_size(size)
    master = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
    backgrounds = [BACKGROUND_IMAGES[i] for i in master.permutation(len(BACKGROUND_IMAGES))]
    specs = []
    for index, rng in enumerate(master.spawn(int(n_scenes))):
        background = backgrounds[index % len(backgrounds)]
        choices = [name for name in FOREGROUND_IMAGES if name != background]
        foreground = choices[int(rng.integers(len(choices)))]
        specs.append(random_scene(index, size, rng, background, foreground))
    return specs


def _prepare(scenes_dir: Path, prepared_dir: Path, design_seed: int, progress: bool | None) -> dict:
    from .prepare import prepare_study

    return prepare_study([scenes_dir], prepared_dir, seed=design_seed, progress=progress is not False)


def _relocate_sources(prepared_dir: Path, old_root: Path, new_root: Path) -> None:
    """Point the manifests' ``source`` paths at the final folder instead of the build folder."""
    from .io import write_bytes_atomic

    def fix(node):
        if isinstance(node, dict):
            return {k: (moved(v) if k == "source" and isinstance(v, str) else fix(v)) for k, v in node.items()}
        if isinstance(node, list):
            return [fix(v) for v in node]
        return node

    def moved(path: str) -> str:
        relative = Path(path).relative_to(old_root) if Path(path).is_relative_to(old_root) else None
        return path if relative is None else str(new_root / relative)

    for manifest in sorted(prepared_dir.rglob("manifest.json")):
        write_bytes_atomic(manifest, _json_bytes(fix(json.loads(manifest.read_text()))))


def build_demo(out_dir: str | Path, n_scenes: int = 4, size: tuple[int, int] = DEFAULT_SIZE,
               seed: SeedLike = 0, methods: Sequence[str] | str | None = None, *,
               overwrite: bool = False, prepare: bool = True,
               progress: bool | None = None) -> DemoResult:
    """Build the demo folder ``out_dir`` (all or nothing; layout in the module docstring).

    Everything is written into a temporary folder beside ``out_dir`` and
    renamed to ``out_dir`` at the end; on any failure the temporary folder is
    removed and an existing ``out_dir`` is left as it was.

    Parameters
    ----------
    out_dir : str or Path
        Folder to create.
    n_scenes : int
        Number of scenes (default 4).
    size : (int, int)
        Frame width and height in pixels (default 320 x 240; each 48..4096).
    seed : int, Generator or None
        Seed of the scenes and of the pair designs; the same integer seed gives
        byte-identical images, flows and designs.
    methods : sequence of str, str or None
        Method names (see :data:`METHODS`), a comma-separated string, ``"all"``,
        or ``None`` for :data:`DEFAULT_METHODS`.
    overwrite : bool
        Replace an existing ``out_dir``.
    prepare : bool
        Run :func:`stimuli.prepare.prepare_study` on the scenes into
        ``out_dir/prepared`` (default).
    progress : bool or None
        Progress bars: ``None`` shows them on a terminal only, ``False`` never.

    Returns
    -------
    DemoResult

    Raises
    ------
    FileExistsError
        ``out_dir`` exists and ``overwrite`` is false.
    ValueError
        Bad ``n_scenes``, ``size`` or ``methods``.
    """
    from tqdm import tqdm

    start = time.perf_counter()
    out_dir = Path(out_dir).absolute()
    if out_dir.exists() and not overwrite:
        raise FileExistsError(f"{out_dir}: already exists (pass overwrite=True to replace it)")
    names = resolve_methods(methods)
    master = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
    specs = scene_specs(n_scenes, size, master)
    design_seed = seed if isinstance(seed, int) else int(master.integers(2 ** 31 - 1))
    seed_info = seed if isinstance(seed, int) else None
    # out_dir was checked above, so the staged folder may replace it whatever it holds.
    with staged_output(out_dir, overwrite=True) as building:
        metrics = {}
        with tqdm(total=len(specs) * len(names), desc="demo scenes", unit="method",
                  disable=None if progress is None else not progress) as bar:
            for spec in specs:
                metrics[spec.name] = build_scene(building / SCENES_DIR / spec.name, spec, names,
                                                 seed_info, on_method=lambda: bar.update(1))
        manifest = None
        if prepare:
            manifest = _prepare(building / SCENES_DIR, building / PREPARED_DIR, design_seed, progress)
            _relocate_sources(building / PREPARED_DIR, building, out_dir)
        summary = {"generator": "stimuli.demo.build_demo", "seed": seed_info, "design_seed": design_seed,
                   "size": list(_check_size(size)), "methods": names, "scenes": metrics,
                   "prepared": PREPARED_DIR if prepare else None}
        (building / DEMO_JSON).write_bytes(_json_bytes(summary))
    if manifest is not None:  # re-read: the paths in it now name out_dir
        manifest = json.loads((out_dir / PREPARED_DIR / "manifest.json").read_text())
    return DemoResult(path=out_dir, scenes=[s.name for s in specs], methods=names,
                      seconds=time.perf_counter() - start, manifest=manifest, metrics=metrics)
