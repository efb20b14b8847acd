"""Configuration and the instance folder.

A deployment's state lives in its *instance folder*: the SQLite database ``perceptlab.db`` (unless a
database URL names another), the generated ``secret_key`` (signs worker tokens and keys the worker
pseudonyms of every export), the stimuli ``perceptlab launch`` prepares, and optionally a
``config.toml``. The folder is, first match wins (:func:`resolve_instance`):

1. ``perceptlab --instance DIR`` (or ``create_app(config)`` of a config loaded with ``instance=``);
2. the environment variable ``PERCEPTLAB_INSTANCE``;
3. ``[server] instance_path`` from ``PERCEPTLAB_SERVER_INSTANCE_PATH`` or the file named in ``PERCEPTLAB_CONFIG``;
4. ``./instance`` in the current folder.

The configuration is then, later wins: the defaults shipped in this package
(``server/default_config.toml``), the file named in ``PERCEPTLAB_CONFIG``, the instance folder's
``config.toml``, ``PERCEPTLAB_<SECTION>_<KEY>`` environment variables (secrets come only from the
environment or the instance folder's ``secret_key``).

The configuration is read once, where a process starts (the ``perceptlab`` command's group callback,
``server.create_app()`` for gunicorn), and passed down from there; nothing else calls :func:`load_config`.
"""
from __future__ import annotations

import os
import secrets
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

DEFAULT_CONFIG = Path(__file__).resolve().parent / "default_config.toml"
#: An example of production overrides (HTTPS cookies, a reverse proxy): copy it and name the copy in
#: ``PERCEPTLAB_CONFIG``. Shipped beside the defaults, so an installed package has it too.
PRODUCTION_EXAMPLE = Path(__file__).resolve().parent / "production.example.toml"
INSTANCE_ENVIRONMENT_VARIABLE = "PERCEPTLAB_INSTANCE"
SECRET_ENVIRONMENT_VARIABLE = "PERCEPTLAB_SECRET_KEY"
INSTANCE_CONFIG = "config.toml"    # optional, inside the instance folder
SECRET_FILE = "secret_key"         # made by the server (or a creating command) when missing
DEFAULT_INSTANCE = "instance"      # relative to the current folder


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


def load_config(environ: dict[str, str] | None = None, instance: str | os.PathLike | None = None) -> dict[str, Any]:
    """Return the merged configuration as nested dicts (sections -> keys).

    Parameters
    ----------
    environ : dict, optional
        The environment to read ``PERCEPTLAB_CONFIG``, ``PERCEPTLAB_INSTANCE`` and ``PERCEPTLAB_*``
        overrides from (default: ``os.environ``).
    instance : path, optional
        The instance folder given for this run (``perceptlab --instance``); wins over the environment.

    Returns
    -------
    dict
        The sections; ``[server] instance_path`` is the resolved instance folder (absolute), and the
        extra section ``instance`` says where it came from: ``path``, ``chosen_by`` (for messages) and
        ``config_file`` (its ``config.toml`` if one was read, else "").

    Raises
    ------
    ValueError
        An environment override that does not parse as the type of its default.
    OSError, tomllib.TOMLDecodeError
        The file named in ``PERCEPTLAB_CONFIG`` (or the instance's ``config.toml``) cannot be read or is not TOML.
    """
    environ = os.environ if environ is None else environ
    with DEFAULT_CONFIG.open("rb") as f:
        config = tomllib.load(f)
    extra = environ.get("PERCEPTLAB_CONFIG")
    file_config: dict[str, Any] = {}
    if extra:
        with open(extra, "rb") as f:
            file_config = tomllib.load(f)
        config = _merge(config, file_config)
    folder, chosen_by = resolve_instance(instance, environ, file_config, extra)
    instance_file = folder / INSTANCE_CONFIG
    read_instance_file = instance_file.is_file()
    if read_instance_file:
        with instance_file.open("rb") as f:
            try:
                config = _merge(config, tomllib.load(f))
            except tomllib.TOMLDecodeError as exc:
                raise ValueError(f"{instance_file}: {exc}") from None
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
    # The folder chosen above is the instance, whatever its own config.toml says about instance_path.
    config.setdefault("server", {})["instance_path"] = str(folder)
    config["instance"] = {"path": str(folder), "chosen_by": chosen_by,
                          "config_file": str(instance_file) if read_instance_file else ""}
    return config


def resolve_instance(explicit: str | os.PathLike | None, environ: Mapping[str, str],
                     file_config: Mapping[str, Any] | None = None,
                     config_file: str | None = None) -> tuple[Path, str]:
    """The instance folder (absolute; nothing is made) and how it was chosen, for messages.

    Order: ``explicit`` (``--instance``), ``PERCEPTLAB_INSTANCE``, ``PERCEPTLAB_SERVER_INSTANCE_PATH``,
    ``[server] instance_path`` of the ``PERCEPTLAB_CONFIG`` file (``file_config``), ``./instance``.
    """
    configured = (file_config or {}).get("server", {}).get("instance_path")
    for value, how in ((explicit, "--instance"),
                       (environ.get(INSTANCE_ENVIRONMENT_VARIABLE), INSTANCE_ENVIRONMENT_VARIABLE),
                       (environ.get("PERCEPTLAB_SERVER_INSTANCE_PATH"), "PERCEPTLAB_SERVER_INSTANCE_PATH"),
                       (configured, f"[server] instance_path in {config_file}")):
        if value is not None and str(value).strip():
            return Path(value).expanduser().absolute(), how
    return Path(DEFAULT_INSTANCE).absolute(), (
        f"the default ./{DEFAULT_INSTANCE} of the current folder: no --instance, {INSTANCE_ENVIRONMENT_VARIABLE} "
        "or [server] instance_path was given")


def describe_instance(config: Mapping[str, Any]) -> str:
    """"the instance folder DIR (chosen by ...)", for messages about what a command looked at."""
    instance = config.get("instance") or {}
    path = instance.get("path") or str(Path(config.get("server", {}).get("instance_path", DEFAULT_INSTANCE)).absolute())
    chosen_by = instance.get("chosen_by") or "[server] instance_path"
    return f"the instance folder {path} (chosen by {chosen_by})"


# ---------------------------------------------------------------- the secret key

def find_secret_key(server: Mapping[str, Any], environ: Mapping[str, str] | None = None) -> tuple[str | None, str]:
    """The key that signs worker tokens and sessions and keys the export pseudonyms, without making one.

    Returns
    -------
    (str or None, str)
        The key (None when there is none yet) and where it came from or would be: ``[server]
        secret_key``, ``PERCEPTLAB_SECRET_KEY`` or the path of the instance folder's ``secret_key`` file.
    """
    environ = os.environ if environ is None else environ
    if server.get("secret_key"):
        return str(server["secret_key"]), "[server] secret_key"
    if environ.get(SECRET_ENVIRONMENT_VARIABLE):
        return environ[SECRET_ENVIRONMENT_VARIABLE], SECRET_ENVIRONMENT_VARIABLE
    path = Path(server.get("instance_path", DEFAULT_INSTANCE)).absolute() / SECRET_FILE
    return (path.read_text().strip() or None) if path.is_file() else None, str(path)


def secret_key(server: Mapping[str, Any], environ: Mapping[str, str] | None = None) -> str:
    """The secret key as :func:`find_secret_key` finds it, else a new random one kept in the instance
    folder (the server, and commands that create a deployment, make it; read-only commands never do)."""
    key, _ = find_secret_key(server, environ)
    return key or _instance_secret(Path(server.get("instance_path", DEFAULT_INSTANCE)).absolute())


def _instance_secret(instance: Path) -> str:
    """A random secret kept in the instance folder, so tokens survive restarts without configuration."""
    instance.mkdir(parents=True, exist_ok=True)
    path = instance / SECRET_FILE
    if not path.exists():
        # Written whole, then linked into place: several server processes starting together
        # agree on one key, and none ever reads a half-written file.
        temporary = instance / f".secret_key.{os.getpid()}.{secrets.token_hex(4)}"
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(secrets.token_hex(32))
        try:
            os.link(temporary, path)
        except FileExistsError:
            pass
        finally:
            temporary.unlink()
    return path.read_text().strip()
