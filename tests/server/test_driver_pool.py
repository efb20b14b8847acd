"""The driver connections of the one-statement paths (server/db.py, DriverPool) on PostgreSQL:
reused, bounded, given back by every thread, closed by ``engine.dispose()``, dropped when broken."""
from __future__ import annotations

import threading

import pytest
from sqlalchemy.exc import TimeoutError as PoolTimeout

from server.db import DriverPool, autocommit_driver_connection, make_engine


@pytest.fixture
def engine(postgres_url):
    engine = make_engine(postgres_url)
    yield engine
    engine.dispose()


def _backend_pid(connection) -> int:
    return connection.execute("SELECT pg_backend_pid()").fetchone()[0]


def test_a_connection_is_reused_in_autocommit_mode(engine):
    with autocommit_driver_connection(engine) as first:
        pid = _backend_pid(first)
        assert first.autocommit
        first.execute("CREATE TABLE pool_probe (x integer)")
    with autocommit_driver_connection(engine) as again:
        assert _backend_pid(again) == pid
        # The table is there for every other connection: nothing waited for a COMMIT.
        with engine.connect() as other:
            assert other.exec_driver_sql("SELECT count(*) FROM pool_probe").scalar() == 0


def test_a_thread_per_request_holds_no_more_than_it_uses(engine):
    # Werkzeug's threaded server starts a thread per request: each gives its connection back, so
    # 40 requests one after another use one connection, however many threads there were.
    pids = []

    def request():
        with autocommit_driver_connection(engine) as connection:
            pids.append(_backend_pid(connection))

    for _ in range(40):
        thread = threading.Thread(target=request)
        thread.start()
        thread.join()
    assert len(set(pids)) == 1


def test_the_pool_is_bounded_and_a_caller_beyond_it_times_out(engine):
    pool = DriverPool(engine, size=2, timeout=0.05)
    held = [pool.take(), pool.take()]
    with pytest.raises(PoolTimeout, match="2 in use"):
        pool.take()
    pool.give_back(held.pop())
    assert pool.take() is not None  # free again
    # A caller waiting for a connection gets the one given back.
    pool = DriverPool(engine, size=1, timeout=30.0)
    first = pool.take()
    got = []
    waiter = threading.Thread(target=lambda: got.append(pool.take()))
    waiter.start()
    pool.give_back(first)
    waiter.join(timeout=30)
    assert got == [first]


def test_dispose_closes_idle_and_returning_connections_and_a_broken_one_is_dropped(engine):
    pool = DriverPool(engine, size=3)
    idle, busy = pool.take(), pool.take()
    pool.give_back(idle)
    engine.dispose()
    assert idle.closed and not busy.closed
    pool.give_back(busy)  # in use during the dispose: closed when it comes back
    assert busy.closed
    fresh = pool.take()
    assert not fresh.closed and fresh is not idle and fresh is not busy
    fresh.close()  # as when the server went away
    pool.discard(fresh)
    again = [pool.take() for _ in range(3)]  # the discarded one no longer counts against the size
    assert all(not c.closed for c in again) and fresh not in again


def test_an_engine_with_a_pool_is_freed(postgres_url):
    # The pool is a value of a dictionary keyed weakly by its engine: it must not keep its engine alive
    # (every app the tests make has an engine of its own).
    import gc
    import weakref

    from server.db import _DRIVER_POOLS

    engine = make_engine(postgres_url)
    with autocommit_driver_connection(engine) as connection:
        assert _backend_pid(connection)
    assert engine in _DRIVER_POOLS
    engine.dispose()
    freed = weakref.ref(engine)
    del engine, connection
    gc.collect()
    assert freed() is None
