"""Configuration: ``config/default.toml``, then the file named in ``PERCEPTLAB_CONFIG``,
then ``PERCEPTLAB_<SECTION>_<KEY>`` environment variables (secrets come only from there)."""
from __future__ import annotations

import os
import tomllib
from pathlib import Path
from typing import Any

DEFAULT_CONFIG = Path(__file__).resolve().parent.parent / "config" / "default.toml"


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
    """Return the merged configuration as nested dicts (sections -> keys)."""
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
