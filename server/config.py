"""Configuration: the defaults shipped in this package (``server/default_config.toml``), then the file
named in ``PERCEPTLAB_CONFIG``, then ``PERCEPTLAB_<SECTION>_<KEY>`` environment variables (secrets come
only from there).

The configuration is read once, where a process starts (the ``perceptlab`` command's group callback,
``server.create_app()`` for gunicorn), and passed down from there; nothing else calls :func:`load_config`.
"""
from __future__ import annotations

import os
import tomllib
from pathlib import Path
from typing import Any

DEFAULT_CONFIG = Path(__file__).resolve().parent / "default_config.toml"
#: An example of production overrides (HTTPS cookies, a reverse proxy): copy it and name the copy in
#: ``PERCEPTLAB_CONFIG``. Shipped beside the defaults, so an installed package has it too.
PRODUCTION_EXAMPLE = Path(__file__).resolve().parent / "production.example.toml"


def _coerce(text: str, like: Any) -> Any:
    """Parse an environment value with the type of the default it overrides."""
    if isinstance(like, bool):
        if text.lower() in ("1", "true", "yes", "on"):
            return True
        if text.lower() in ("0", "false", "no", "off"):
            return False
        raise ValueError(f"expected a boolean, got {text!r}")
    if isinstance(like, int):
        return int(text)
    if isinstance(like, float):
        return float(text)
    return text


def _merge(base: dict, override: dict) -> dict:
    merged = dict(base)
    for key, value in override.items():
        merged[key] = _merge(merged[key], value) if isinstance(value, dict) and isinstance(merged.get(key), dict) else value
    return merged


def load_config(environ: dict[str, str] | None = None) -> dict[str, Any]:
    """Return the merged configuration as nested dicts (sections -> keys).

    Parameters
    ----------
    environ : dict, optional
        The environment to read ``PERCEPTLAB_CONFIG`` and ``PERCEPTLAB_*`` overrides from
        (default: ``os.environ``).

    Raises
    ------
    ValueError
        An environment override that does not parse as the type of its default.
    OSError, tomllib.TOMLDecodeError
        The file named in ``PERCEPTLAB_CONFIG`` cannot be read or is not TOML.
    """
    environ = os.environ if environ is None else environ
    with DEFAULT_CONFIG.open("rb") as f:
        config = tomllib.load(f)
    extra = environ.get("PERCEPTLAB_CONFIG")
    if extra:
        with open(extra, "rb") as f:
            config = _merge(config, tomllib.load(f))
    for section, values in config.items():
        if not isinstance(values, dict):
            continue
        for key, default in values.items():
            name = f"PERCEPTLAB_{section}_{key}".upper()
            if name in environ:
                try:
                    values[key] = _coerce(environ[name], default)
                except ValueError as exc:
                    raise ValueError(f"{name}: {exc}") from None
    return config
