"""PostgreSQL: perceptlab_paired_vote installed from its one home, server/paradigms/paired/vote.sql

Migrations 0009 and 0012 installed the function from copies of its text held in the migrations;
from here on its text lives in the paradigm's package (server/paradigms/paired/vote.sql), beside
the Python rules it mirrors, and the migrations that install it read that file. Each such
migration pins the SHA-256 of the text it was written for in ``SQL_FILES``: a change of the file
needs a new migration that installs it again (tests/server/test_vote_rules.py fails until the newest
one pins the file's hash, and checks that the database's function is the file's).

The text is 0012's with one rule more: a pilot participant's vote fills no pair's target in the
function too (the regular path's rule, server/pilot.py), so a participant marked as a pilot while
answering a page is not counted by the votes the function stores after the marking.

Downgrade restores 0012's function (read from that migration).

Revision ID: 0014_paired_vote_sql
Revises: 0013_pilot
Create Date: 2026-11-28 11:00:00
"""
from __future__ import annotations

from alembic import op

from server.migrations.sql_files import install, migration


revision = '0014_paired_vote_sql'
down_revision = '0013_pilot'
branch_labels = None
depends_on = None

# SQL file (relative to the server package) -> the SHA-256 of the text this migration installs.
SQL_FILES = {'paradigms/paired/vote.sql': '6463c581b7772000ad68f9eceaca66f5cae653f689d1ac6d4fbef67419e8bb42'}


def upgrade() -> None:
    install(SQL_FILES)


def downgrade() -> None:
    bind = op.get_bind()
    if bind.dialect.name == 'postgresql':
        # The function as migration 0012 created it.
        bind.exec_driver_sql(migration('0012_terminal_stages.py').VOTE_FUNCTION)
