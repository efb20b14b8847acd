"""Database access for CLI commands: the same URL rules as the server, migrations applied first."""
from __future__ import annotations

import os
from contextlib import contextmanager
from typing import Iterator


def database_url(explicit: str | None = None) -> str:
    from server.config import load_config
    from server.db import default_database_url

    server = load_config().get("server", {})
    return (explicit or server.get("database_url") or os.environ.get("PERCEPTLAB_DATABASE_URL")
            or default_database_url(server.get("instance_path", "instance")))


@contextmanager
def cli_session(explicit_url: str | None = None) -> Iterator:
    """A session that commits on success and rolls back on any error."""
    from server.db import make_engine, make_session_factory, upgrade

    url = database_url(explicit_url)
    upgrade(url)
    engine = make_engine(url)
    session = make_session_factory(engine)()
    try:
        yield session
        session.commit()
    except BaseException:
        session.rollback()
        raise
    finally:
        session.close()
        engine.dispose()
