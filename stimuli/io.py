"""Reading and writing stimulus images.

Images are handled as ``(height, width, 3)`` RGB arrays of dtype ``uint8`` or
``uint16``. Reading checks the whole file (a truncated or corrupt file is an
error naming the file, never a silently half-grey image); writing is atomic
(a temporary file in the target folder, then :func:`os.replace`), so a reader
never sees a half-written PNG.
"""
from __future__ import annotations

import io
import os
import tempfile
from pathlib import Path

import numpy as np

#: File name suffixes recognised as images when scanning a folder.
IMAGE_SUFFIXES = frozenset({".png", ".jpg", ".jpeg", ".bmp", ".tif", ".tiff", ".ppm", ".pgm", ".webp"})

_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"

# mkstemp creates files readable by the owner only; finished files get the usual umask-based mode.
_UMASK = os.umask(0)
os.umask(_UMASK)
FILE_MODE = 0o666 & ~_UMASK
FOLDER_MODE = 0o777 & ~_UMASK


class StimulusInputError(ValueError):
    """Bad input to the stimulus tools (file, parameter or image content)."""


class ImageReadError(StimulusInputError):
    """An image file could not be read completely."""


def is_image_file(path: str | os.PathLike) -> bool:
    """True for a regular, non-hidden file with an image suffix (see :data:`IMAGE_SUFFIXES`)."""
    path = Path(path)
    return path.is_file() and not path.name.startswith(".") and path.suffix.lower() in IMAGE_SUFFIXES


def max_value(dtype: np.dtype | type) -> int:
    """Largest pixel value of an image dtype (255 for uint8, 65535 for uint16)."""
    dtype = np.dtype(dtype)
    if dtype not in (np.dtype(np.uint8), np.dtype(np.uint16)):
        raise StimulusInputError(f"images must be uint8 or uint16, got {dtype}")
    return int(np.iinfo(dtype).max)


def check_rgb(image: np.ndarray, name: str = "image") -> np.ndarray:
    """Return ``image`` if it is an ``(H, W, 3)`` uint8/uint16 array; raise naming ``name`` otherwise."""
    image = np.asarray(image)
    if image.ndim != 3 or image.shape[2] != 3:
        raise StimulusInputError(f"{name}: expected an (height, width, 3) RGB array, got shape {image.shape}")
    if image.dtype not in (np.uint8, np.uint16):
        raise StimulusInputError(f"{name}: images must be uint8 or uint16, got {image.dtype}")
    return image


def read_image(path: str | os.PathLike) -> np.ndarray:
    """Read an image file as an RGB array (uint8, or uint16 for 16-bit PNGs).

    Grey images are repeated over three channels; an alpha channel is dropped
    (stimuli are shown opaque). EXIF orientation tags are ignored: the pixel
    grid is used as stored, so that reference and candidates stay aligned.

    Raises
    ------
    ImageReadError
        The file is missing, not an image, corrupt or truncated; the message names the file.
    """
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ImageReadError(f"{path}: cannot read file ({exc.strerror or exc})") from None
    image = _decode_with_pillow(data, path)  # decodes everything: catches truncation for every format
    if data.startswith(_PNG_SIGNATURE) and len(data) > 24 and data[24] == 16:
        image = _decode_16bit_png(data, path)  # Pillow would reduce 16-bit RGB to 8 bits
    return image


def _decode_with_pillow(data: bytes, path: Path) -> np.ndarray:
    from PIL import Image

    try:
        img = Image.open(io.BytesIO(data))
        img.load()  # raises OSError("image file is truncated ...") on short files
    except (OSError, SyntaxError, ValueError, Image.DecompressionBombError) as exc:
        reason = "image file is truncated" if "truncated" in str(exc) else f"not a readable image ({exc})"
        raise ImageReadError(f"{path}: {reason}") from None
    with img:
        return _pillow_to_rgb(img, path)


def _pillow_to_rgb(img, path: Path) -> np.ndarray:
    if img.mode in ("I;16", "I;16B", "I;16L", "I"):
        grey = np.asarray(img)
        if grey.min() < 0 or grey.max() > 65535:
            raise ImageReadError(f"{path}: 32-bit integer images are not supported (use 8- or 16-bit)")
        return np.repeat(grey.astype(np.uint16)[:, :, None], 3, axis=2)
    if img.mode == "F":
        raise ImageReadError(f"{path}: floating-point images are not supported (use 8- or 16-bit)")
    return np.asarray(img.convert("RGB"), dtype=np.uint8).copy()


def _decode_16bit_png(data: bytes, path: Path) -> np.ndarray:
    import cv2

    decoded = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_UNCHANGED)
    if decoded is None:
        raise ImageReadError(f"{path}: not a readable 16-bit PNG")
    if decoded.ndim == 2:
        return np.repeat(decoded[:, :, None], 3, axis=2).astype(np.uint16)
    return np.ascontiguousarray(decoded[:, :, 2::-1]).astype(np.uint16)  # BGR(A) -> RGB


def encode_png(image: np.ndarray, compression: int = 3) -> bytes:
    """PNG bytes of an RGB uint8/uint16 image (16-bit images stay 16-bit)."""
    import cv2

    image = check_rgb(image)
    ok, buffer = cv2.imencode(".png", np.ascontiguousarray(image[:, :, ::-1]),
                              [cv2.IMWRITE_PNG_COMPRESSION, int(compression)])
    if not ok:  # pragma: no cover - OpenCV only fails here on exotic builds
        raise RuntimeError("OpenCV could not encode the PNG")
    return buffer.tobytes()


def write_bytes_atomic(path: str | os.PathLike, data: bytes) -> Path:
    """Write ``data`` to ``path`` through a temporary file in the same folder and :func:`os.replace`."""
    path = Path(path)
    fd, tmp_name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.chmod(tmp_name, FILE_MODE)
        os.replace(tmp_name, path)
    except BaseException:
        Path(tmp_name).unlink(missing_ok=True)
        raise
    return path


def write_png(path: str | os.PathLike, image: np.ndarray, compression: int = 3) -> Path:
    """Write an RGB uint8 or uint16 image as PNG, atomically. Returns the path.

    ``compression`` is zlib's level 0-9 (3: a good speed/size balance for stimuli).
    """
    return write_bytes_atomic(path, encode_png(image, compression))
