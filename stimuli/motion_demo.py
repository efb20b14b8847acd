"""Demo clips for the motion-matching experiment, with exact ground-truth flow.

Two procedurally rendered clips (no network: the textures are pictures that
scikit-image ships, as in :mod:`stimuli.demo`):

``demo_objects``
    three textured objects (discs or star-shaped polygons) moving over a static
    textured background: one only translates, one also rotates, one also
    grows or shrinks;
``demo_camera``
    the same kind of scene seen by a camera that pans and zooms, so the
    background moves too and the objects' image motion combines both.

Every layer (background, objects) is a rigid picture under a similarity
transform that depends on the frame ``t``: a layer point ``Y`` is at
``M_t · Y`` in frame ``t`` (3 x 3 homogeneous matrices, pixel coordinates,
``x`` right, ``y`` down). Frame ``t`` samples each layer's picture at
``M_t⁻¹ · p`` (bilinear); a pixel belongs to the top layer whose outline
contains ``M_t⁻¹ · p``. The flow from frame ``t`` to ``t + 1`` at pixel ``p``
of layer ``L`` is therefore exactly ``M_{t+1} M_t⁻¹ p − p``, at every pixel,
object edges included.

:func:`build_motion_demo` writes a clip set (:mod:`stimuli.motion_clips`)::

    OUT/manifest.json
    OUT/noise.png                           2048 x 2048 grey 1/f² texture
    OUT/<clip>/frame_0000.png ...           20 frames, 768 x 432
    OUT/<clip>/flow_0000.flo ...            flow[i] = frame i -> i+1 (the last frame has none)

Ten probes per clip, all on the same clip frame (as in HuPerFlow), are drawn
among pixels well inside one layer, not occluded in the next frame, at least
60 px from the borders, in textured parts of the image, with speeds of 1-20
px/frame: on the objects in ``demo_objects`` (its background is static) and on
objects and background in ``demo_camera``. The same seed gives byte-identical
files; building takes about 5 s (most of it PNG and ``.flo`` writing).
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

from .demo import _bundled_image, _object_outline

SIZE = (768, 432)  # width, height
N_FRAMES = 20
PROBE_FRAME = 10  # movie windows 3..17 (15 frames) and 6..15 (10 frames) both fit
PROBES_PER_CLIP = 10
MIN_SPEED, MAX_SPEED = 1.0, 20.0
PROBE_BORDER = 60  # half the 120 px cue circle: the cue stays inside the frame
PROBE_SPACING = 32.0  # px between probes
MIN_CONTRAST, TEXTURE_RADIUS = 10.0, 7  # mean Sobel magnitude (grey levels) within ±7 px
LAYER_MARGIN = 6  # px a probe keeps from any layer boundary (its neighbourhood moves rigidly)
BACKGROUNDS = ("coffee", "rocket", "chelsea")
TEXTURES = ("brick", "gravel", "astronaut", "immunohistochemistry", "chelsea", "coffee")


# --------------------------------------------------------------------------- scene model

def _translation(dx: float, dy: float) -> np.ndarray:
    return np.array([[1.0, 0.0, dx], [0.0, 1.0, dy], [0.0, 0.0, 1.0]])


def _rotation_scale(angle_deg: float, scale: float) -> np.ndarray:
    c, s = scale * np.cos(np.radians(angle_deg)), scale * np.sin(np.radians(angle_deg))
    return np.array([[c, -s, 0.0], [s, c, 0.0], [0.0, 0.0, 1.0]])


@dataclass(frozen=True)
class Camera:
    """Camera pan (px/frame) and zoom (scale factor per frame) about the frame centre; identity at ``t = ref``."""

    pan: tuple[float, float] = (0.0, 0.0)
    zoom: float = 1.0
    centre: tuple[float, float] = (0.0, 0.0)
    ref: int = PROBE_FRAME

    def matrix(self, t: int) -> np.ndarray:
        """World -> image of frame ``t``."""
        k = t - self.ref
        cx, cy = self.centre
        return (_translation(cx + k * self.pan[0], cy + k * self.pan[1])
                @ _rotation_scale(0.0, self.zoom ** k) @ _translation(-cx, -cy))


@dataclass(frozen=True)
class MovingObject:
    """A textured object: outline around its own origin and its motion in the world.

    At frame ``t`` (``k = t − ref``) the object point ``Y`` is at world position
    ``position + k·velocity + growth^k · R(k·spin_deg) · Y``.
    """

    name: str
    texture: str
    outline: np.ndarray  # (n, 2) around (0, 0)
    shape_kind: str
    texture_offset: tuple[float, float]  # texture pixel of object point (0, 0)
    texture_scale: float
    position: tuple[float, float]  # world position of the origin at t = ref
    velocity: tuple[float, float]  # px/frame
    spin_deg: float  # degrees/frame (positive: clockwise on screen, since y points down)
    growth: float  # scale factor per frame
    ref: int = PROBE_FRAME

    def matrix(self, t: int) -> np.ndarray:
        """Object -> world at frame ``t``."""
        k = t - self.ref
        x, y = self.position
        return (_translation(x + k * self.velocity[0], y + k * self.velocity[1])
                @ _rotation_scale(k * self.spin_deg, self.growth ** k))


@dataclass(frozen=True)
class ClipSpec:
    """One demo clip: background picture, camera and objects (bottom to top)."""

    clip_id: str
    size: tuple[int, int]
    n_frames: int
    background: str
    background_scale: float
    camera: Camera
    objects: tuple[MovingObject, ...]

    def layer_names(self) -> list[str]:
        """Layer names in drawing order; index 0 is the background."""
        return ["background", *(o.name for o in self.objects)]

    def layer_matrix(self, layer: int, t: int) -> np.ndarray:
        """Layer coordinates -> image of frame ``t``."""
        camera = self.camera.matrix(t)
        return camera if layer == 0 else camera @ self.objects[layer - 1].matrix(t)

    def layer_flow(self, layer: int, t: int, x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Exact flow (frame ``t`` -> ``t + 1``) of layer ``layer`` at image points ``(x, y)`` of frame ``t``."""
        step = self.layer_matrix(layer, t + 1) @ np.linalg.inv(self.layer_matrix(layer, t))
        x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
        return (step[0, 0] * x + step[0, 1] * y + step[0, 2] - x,
                step[1, 0] * x + step[1, 1] * y + step[1, 2] - y)


def _random_object(rng: np.random.Generator, index: int, anchor: np.ndarray, texture: str, *,
                   spin: bool, grow: bool, size: tuple[int, int]) -> MovingObject:
    unit = min(size) / 432.0
    radius = rng.uniform(75, 100) * unit
    kind, outline = _object_outline(rng, np.zeros(2), radius)
    angle = rng.uniform(0, 2 * np.pi)
    speed = rng.uniform(3.0, 8.0) * unit
    height, width = _bundled_image(texture).shape[:2]
    scale = 3.0 * 2 * radius / min(height, width)  # the object shows about a third of the picture
    reach = 1.1 * radius
    offset = (rng.uniform(reach, max(reach, width * scale - reach)),
              rng.uniform(reach, max(reach, height * scale - reach)))
    return MovingObject(name=f"object{index}", texture=texture, outline=outline, shape_kind=kind,
                        texture_offset=(float(offset[0]), float(offset[1])), texture_scale=float(scale),
                        position=(float(anchor[0]), float(anchor[1])),
                        velocity=(float(speed * np.cos(angle)), float(speed * np.sin(angle))),
                        spin_deg=float(rng.choice([-1, 1]) * rng.uniform(1.0, 2.5)) if spin else 0.0,
                        growth=float(rng.choice([0.985, 1.015]) * rng.uniform(0.998, 1.002)) if grow else 1.0)


def clip_specs(seed: int | np.random.Generator = 0, size: tuple[int, int] = SIZE,
               n_frames: int = N_FRAMES) -> list[ClipSpec]:
    """The two demo clips (``demo_objects``, ``demo_camera``) drawn from ``seed``."""
    rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
    width, height = size
    centre = ((width - 1) / 2, (height - 1) / 2)
    specs = []
    for clip_id, rng_clip in zip(("demo_objects", "demo_camera"), rng.spawn(2)):
        textures = [TEXTURES[i] for i in rng_clip.permutation(len(TEXTURES))[:3]]
        # Objects sit in the left, middle and right thirds at the probe frame, so they start apart.
        anchors = [np.array([(0.2 + 0.3 * i) * width, rng_clip.uniform(0.35, 0.65) * height]) for i in range(3)]
        objects = tuple(_random_object(rng_clip, i, anchors[i], textures[i], spin=i == 1, grow=i == 2, size=size)
                        for i in range(3))
        if clip_id == "demo_camera":
            angle = rng_clip.uniform(0, 2 * np.pi)
            pan = rng_clip.uniform(2.5, 5.0) * np.array([np.cos(angle), np.sin(angle)])
            camera = Camera(pan=(float(pan[0]), float(pan[1])), zoom=float(rng_clip.uniform(1.006, 1.012)),
                            centre=centre)
        else:
            camera = Camera(centre=centre)
        background = BACKGROUNDS[int(rng_clip.integers(len(BACKGROUNDS)))]
        bg_height, bg_width = _bundled_image(background).shape[:2]
        # Covers the frame with a 40 % margin for the camera's pan and zoom-out in early frames.
        bg_scale = 1.4 * max(width / bg_width, height / bg_height)
        specs.append(ClipSpec(clip_id=clip_id, size=size, n_frames=n_frames, background=background,
                              background_scale=float(bg_scale), camera=camera, objects=objects))
    return specs


# --------------------------------------------------------------------------- rendering

@lru_cache(maxsize=32)
def _texture(name: str, scale: float) -> np.ndarray:
    """Bundled picture resized by ``scale``, float32 RGB (sampled with cv2.remap)."""
    import cv2

    image = _bundled_image(name)
    height, width = image.shape[:2]
    size = (max(4, round(width * scale)), max(4, round(height * scale)))
    interpolation = cv2.INTER_AREA if scale < 1 else cv2.INTER_CUBIC
    return cv2.resize(image.astype(np.float32), size, interpolation=interpolation)


def _map(matrix_inverse: np.ndarray, xs: np.ndarray, ys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    m = matrix_inverse
    return m[0, 0] * xs + m[0, 1] * ys + m[0, 2], m[1, 0] * xs + m[1, 1] * ys + m[1, 2]


def _sample(texture: np.ndarray, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    import cv2

    # Mirrored beyond the picture: never blank, should a camera reach its edge.
    return cv2.remap(texture, x.astype(np.float32), y.astype(np.float32), interpolation=cv2.INTER_LINEAR,
                     borderMode=cv2.BORDER_REFLECT_101)


def _inside(obj: MovingObject, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    from skimage.measure import points_in_poly

    # The exact polygon test only near the object (its outline lies within max_radius of the origin).
    max_radius = np.hypot(obj.outline[:, 0], obj.outline[:, 1]).max()
    inside = x * x + y * y <= max_radius * max_radius
    inside[inside] = points_in_poly(np.column_stack([x[inside], y[inside]]), obj.outline)
    return inside


def render_frame(spec: ClipSpec, t: int) -> tuple[np.ndarray, np.ndarray]:
    """Frame ``t`` of a clip (uint8 RGB) and its layer map (int8: 0 background, ``i`` = object ``i``)."""
    width, height = spec.size
    ys, xs = np.indices((height, width), dtype=np.float64)
    bg = _texture(spec.background, spec.background_scale)
    bg_origin = (np.array(bg.shape[1::-1]) - 1) / 2 - (np.array(spec.size) - 1) / 2  # centred picture
    wx, wy = _map(np.linalg.inv(spec.layer_matrix(0, t)), xs, ys)
    image = _sample(bg, wx + bg_origin[0], wy + bg_origin[1])
    layers = np.zeros((height, width), dtype=np.int8)
    for index, obj in enumerate(spec.objects, start=1):
        ox, oy = _map(np.linalg.inv(spec.layer_matrix(index, t)), xs, ys)
        inside = _inside(obj, ox, oy)
        texture = _texture(obj.texture, obj.texture_scale)
        image[inside] = _sample(texture, obj.texture_offset[0] + ox, obj.texture_offset[1] + oy)[inside]
        layers[inside] = index
    return np.clip(np.rint(image), 0, 255).astype(np.uint8), layers


def exact_flow(spec: ClipSpec, t: int, layers: np.ndarray) -> np.ndarray:
    """Flow from frame ``t`` to ``t + 1`` (``(H, W, 2)`` float32) given frame ``t``'s layer map."""
    height, width = layers.shape
    ys, xs = np.indices((height, width), dtype=np.float64)
    flow = np.zeros((height, width, 2), dtype=np.float64)
    for layer in np.unique(layers):
        mask = layers == layer
        u, v = spec.layer_flow(int(layer), t, xs[mask], ys[mask])
        flow[mask, 0], flow[mask, 1] = u, v
    return flow.astype(np.float32)


# --------------------------------------------------------------------------- probes

def local_contrast(image: np.ndarray, radius: int = TEXTURE_RADIUS) -> np.ndarray:
    """Mean Sobel gradient magnitude of the grey image within ``±radius`` px of each pixel."""
    import cv2

    grey = cv2.cvtColor(image, cv2.COLOR_RGB2GRAY).astype(np.float32)
    magnitude = np.hypot(cv2.Sobel(grey, cv2.CV_32F, 1, 0, ksize=3), cv2.Sobel(grey, cv2.CV_32F, 0, 1, ksize=3))
    return cv2.blur(magnitude, (2 * radius + 1, 2 * radius + 1), borderType=cv2.BORDER_REFLECT_101)


def probe_candidates(spec: ClipSpec, flow: np.ndarray, layers: np.ndarray, next_layers: np.ndarray,
                     image: np.ndarray) -> np.ndarray:
    """Boolean map of pixels fit for a probe at frame ``t`` (see the module docstring)."""
    import cv2

    height, width = layers.shape
    kernel = np.ones((2 * LAYER_MARGIN + 1, 2 * LAYER_MARGIN + 1), np.uint8)
    interior = np.zeros(layers.shape, dtype=bool)
    for layer in np.unique(layers):
        interior |= cv2.erode((layers == layer).astype(np.uint8), kernel, borderType=cv2.BORDER_REPLICATE) > 0
    ys, xs = np.indices(layers.shape)
    # Not occluded: the point lands on its own layer in the next frame.
    tx = np.clip(np.rint(xs + flow[..., 0]).astype(int), 0, width - 1)
    ty = np.clip(np.rint(ys + flow[..., 1]).astype(int), 0, height - 1)
    visible = next_layers[ty, tx] == layers
    speed = np.hypot(flow[..., 0], flow[..., 1])
    # Textured neighbourhood: motion is visible there (not in a flat patch of sky).
    textured = local_contrast(image) >= MIN_CONTRAST
    ok = interior & visible & textured & (speed >= MIN_SPEED) & (speed <= MAX_SPEED)
    ok[:PROBE_BORDER] = ok[height - PROBE_BORDER:] = False
    ok[:, :PROBE_BORDER] = ok[:, width - PROBE_BORDER:] = False
    return ok


def choose_demo_probes(spec: ClipSpec, candidates: np.ndarray, layers: np.ndarray, rng: np.random.Generator,
                       n: int = PROBES_PER_CLIP) -> list[tuple[int, int, int]]:
    """``n`` probes ``(x, y, layer)`` at least :data:`PROBE_SPACING` apart, spread over the layers.

    Layers take turns (objects first, then the background), each turn taking
    the next fitting candidate of that layer in a seeded random order; a layer
    with no fitting candidate left drops out.
    """
    ys, xs = np.nonzero(candidates)
    present = [int(v) for v in np.unique(layers[ys, xs])]
    order = [layer for layer in present if layer != 0] + ([0] if 0 in present else [])
    queues = {layer: list(rng.permutation(np.flatnonzero(layers[ys, xs] == layer))) for layer in order}
    chosen: list[tuple[int, int, int]] = []
    while len(chosen) < n and order:
        for layer in list(order):
            queue = queues[layer]
            while queue:
                index = queue.pop(0)
                x, y = int(xs[index]), int(ys[index])
                if all((x - cx) ** 2 + (y - cy) ** 2 >= PROBE_SPACING ** 2 for cx, cy, _ in chosen):
                    chosen.append((x, y, layer))
                    break
            else:
                order.remove(layer)
            if len(chosen) == n:
                break
    if len(chosen) < n:
        raise RuntimeError(f"{spec.clip_id}: only {len(chosen)} of {n} probe positions fit; try another seed")
    return chosen


# --------------------------------------------------------------------------- building

def _clip_meta(spec: ClipSpec, probes: list[tuple[int, int, int]], seed: object) -> dict:
    names = spec.layer_names()
    return {"generator": "stimuli.motion_demo.build_motion_demo", "seed": seed,
            "background_image": f"skimage.data.{spec.background}",
            "camera": {"pan": list(spec.camera.pan), "zoom": spec.camera.zoom, "centre": list(spec.camera.centre),
                       "ref_frame": spec.camera.ref},
            "objects": [{"name": o.name, "texture": f"skimage.data.{o.texture}", "shape": o.shape_kind,
                         "position_at_ref": list(o.position), "velocity": list(o.velocity),
                         "spin_deg_per_frame": o.spin_deg, "growth_per_frame": o.growth} for o in spec.objects],
            "probe_layers": {f"p{i:02d}": names[layer] for i, (_, _, layer) in enumerate(probes)}}


def _build_clip(folder: Path, spec: ClipSpec, rng: np.random.Generator, seed: object, bar) -> dict:
    from .flow_io import write_flo
    from .io import write_png

    folder.mkdir(parents=True)
    rendered = [render_frame(spec, t) for t in range(spec.n_frames)]
    frames, flows = [], []
    for t, (image, layers) in enumerate(rendered):
        frames.append(f"{spec.clip_id}/frame_{t:04d}.png")
        write_png(folder / f"frame_{t:04d}.png", image)
        if t < spec.n_frames - 1:
            flow = exact_flow(spec, t, layers)
            write_flo(folder / f"flow_{t:04d}.flo", flow)
            flows.append(f"{spec.clip_id}/flow_{t:04d}.flo")
            if t == PROBE_FRAME:
                probe_flow = flow
        bar.update(1)
    candidates = probe_candidates(spec, probe_flow, rendered[PROBE_FRAME][1], rendered[PROBE_FRAME + 1][1],
                                  rendered[PROBE_FRAME][0])
    probes = choose_demo_probes(spec, candidates, rendered[PROBE_FRAME][1], rng)
    return {"clip_id": spec.clip_id, "dataset": "demo", "frame_rate": 30, "frames": frames, "flow": [*flows, None],
            "probes": [{"probe_id": f"p{i:02d}", "x": float(x), "y": float(y), "frame": PROBE_FRAME}
                       for i, (x, y, _) in enumerate(probes)],
            "meta": _clip_meta(spec, probes, seed)}


def build_motion_demo(out_dir: str | Path, *, seed: int = 0, progress: bool = False) -> Path:
    """Write the demo clip set (layout in the module docstring) into ``out_dir``.

    The folder appears only once complete (built beside it, then renamed); an
    existing empty folder is replaced, a non-empty one is an error. The same
    ``seed`` gives byte-identical files.

    Parameters
    ----------
    out_dir : str or Path
        Folder to create.
    seed : int
        Random seed of the scenes, probes and noise texture.
    progress : bool
        Show a progress bar.

    Returns
    -------
    Path
        ``out_dir/manifest.json`` (valid for :func:`stimuli.motion_clips.load_clip_manifest`).

    Raises
    ------
    FileExistsError
        ``out_dir`` exists and is not an empty folder.
    """
    from tqdm import tqdm

    from .motion_clips import MANIFEST_NAME, write_clip_manifest, write_grey_png
    from .noise import brownian_noise
    from .prepare import staged_output

    out_dir = Path(out_dir).absolute()
    if out_dir.exists() and (not out_dir.is_dir() or any(out_dir.iterdir())):
        raise FileExistsError(f"{out_dir}: already exists and is not an empty folder")
    master = np.random.default_rng(seed)
    specs = clip_specs(master)
    probe_rngs = master.spawn(len(specs))
    with staged_output(out_dir, overwrite=False) as building:
        with tqdm(total=sum(s.n_frames for s in specs), desc="motion demo", unit="frame",
                  disable=not progress) as bar:
            clips = [_build_clip(building / spec.clip_id, spec, rng, seed, bar)
                     for spec, rng in zip(specs, probe_rngs)]
        write_grey_png(building / "noise.png", brownian_noise(2048, rng=master.spawn(1)[0]))
        write_clip_manifest(building / MANIFEST_NAME, clips, "noise.png")
    return out_dir / MANIFEST_NAME
