"""PostgreSQL: perceptlab_rating_response installed from its one home, server/paradigms/rating/rating.sql

The rating paradigm's one-statement path (server/paradigms/rating/paradigm.py,
record_rating_in_one_statement): the common ratings in one round trip, as paired votes are in
perceptlab_paired_vote. The text lives in the paradigm's package; this migration reads the file
(server/migrations/sql_files.py) and pins its SHA-256 in ``SQL_FILES`` (tests/server/test_vote_rules.py fails
when a changed file has no newer migration pinning it, or when the database's function is not the
file's).

Downgrade drops the function (the regular path then takes every rating: record_in_one_statement
meets the missing function as an error, so the code of this revision needs it).

Revision ID: 0017_rating_sql
Revises: 0016_prolific
Create Date: 2026-11-28 12:30:00
"""
from __future__ import annotations

from alembic import op

from server.migrations.sql_files import install


revision = '0017_rating_sql'
down_revision = '0016_prolific'
branch_labels = None
depends_on = None

# SQL file (relative to the server package) -> the SHA-256 of the text this migration installs.
SQL_FILES = {'paradigms/rating/rating.sql': '0e041e6d2486fc9f95f20bb3d2e752e82e703b33a7a9d8fe2e93005e97ef86b4'}
# The function's signature, for its downgrade.
RATING_FUNCTION = ('perceptlab_rating_response(integer, text, integer, integer, text, double precision, '
                   'double precision, text, double precision, double precision, double precision, double precision, '
                   'timestamptz, timestamptz, integer, double precision, integer, integer, integer)')


def upgrade() -> None:
    install(SQL_FILES)


def downgrade() -> None:
    bind = op.get_bind()
    if bind.dialect.name == 'postgresql':
        bind.exec_driver_sql(f'DROP FUNCTION IF EXISTS {RATING_FUNCTION}')
