"""perceptlab server: Flask app, models, MTurk and storage services, and the CLI.

Importing this package stays cheap: the CLI's analysis and stimulus commands
must not pay for Flask or SQLAlchemy, so :func:`create_app` imports them itself.
"""
from __future__ import annotations

from typing import Any


def create_app(config: dict[str, Any] | None = None, **overrides: Any):
    """Build the Flask application.

    Parameters
    ----------
    config : dict, optional
        Nested configuration as returned by :func:`server.config.load_config`. Callers that have
        read it already (the ``perceptlab`` command) pass it in; without it, this is where a
        server process starts (``gunicorn 'server:create_app()'``), so it is read here, once:
        ``server/default_config.toml``, ``PERCEPTLAB_CONFIG``, ``PERCEPTLAB_*`` environment variables.
    **overrides
        Keys of the ``[server]`` section to override, e.g. ``database_url=...``,
        ``instance_path=...``, ``secret_key=...``, ``testing=True``.
    """
    from .app import build_app

    if config is None:
        from .config import load_config

        config = load_config()
    return build_app(config, overrides)
