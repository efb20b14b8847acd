"""PostgreSQL: the paged paradigms' one-statement functions share the end of a page (perceptlab_page_answered)

perceptlab_paired_vote (server/paradigms/paired/vote.sql) and perceptlab_rating_response
(server/paradigms/rating/rating.sql) each renewed the page's reservation and ended a page of trials with
the same statements; they now call perceptlab_page_answered (server/paradigms/paged.sql), the SQL twin of
mark_page_done and end_page (server/paradigms/paged.py). This migration installs the three files, the
helper first, and pins their SHA-256 in ``SQL_FILES``.

Downgrade puts the statements back in place of the call in both functions as the database holds them
(the statements as migration 0012's text of perceptlab_paired_vote has them, the same in both), which
gives back the functions of migrations 0014 and 0017, and drops the helper.

Revision ID: 0019_shared_page_sql
Revises: 0018_stopping
Create Date: 2026-11-28 14:30:00
"""
from __future__ import annotations

from alembic import op

from server.migrations.sql_files import install, migration


revision = '0019_shared_page_sql'
down_revision = '0018_stopping'
branch_labels = None
depends_on = None

# SQL file (relative to the server package) -> the SHA-256 of the text this migration installs, in order.
SQL_FILES = {'paradigms/paged.sql': 'eef547bf1b15002ce4a2cf6837a29459f15bda1689c68631282565b12b037b49',
             'paradigms/paired/vote.sql': '449c2c94110dce8b4307ee29d811178f5f191626179c5853fb79e2eb6703fd30',
             'paradigms/rating/rating.sql': '70ca6ce482e975c2ba570fa0c53d36b2f642487332d595a5ec272c3313b0402e'}
PAGE_FUNCTION = 'perceptlab_page_answered(integer, integer, text, boolean, timestamptz, timestamptz)'
CALLERS = ('perceptlab_paired_vote', 'perceptlab_rating_response')
# The call as both functions make it (its downgrade puts back the statements it stands for).
CALL = """    -- The reservation renewed, and the end of a page of trials (server/paradigms/paged.sql).
    stage := perceptlab_page_answered(a.id, t.page_id, a.stage, NOT t.is_quiz AND open_left = 0 AND a.stage = 'trials',
                                      p_reserved_until, p_created_at);
"""


def upgrade() -> None:
    install(SQL_FILES)


def _replaced_statements() -> str:
    """The statements the call stands for, from the reservation's renewal to the end of the page's IF, as
    migration 0012's perceptlab_paired_vote holds them (0014's and 0017's functions hold them the same)."""
    text = migration('0012_terminal_stages.py').VOTE_FUNCTION
    start = text.index('    UPDATE page SET reserved_until')
    end_if = '    END IF;\n'
    end = text.index(end_if, text.index("stage := 'page_done';", start)) + len(end_if)
    return text[start:end]


def downgrade() -> None:
    bind = op.get_bind()
    if bind.dialect.name == 'postgresql':
        replaced = _replaced_statements()
        for name in CALLERS:
            definition = bind.exec_driver_sql(f"SELECT pg_get_functiondef('{name}'::regproc)").scalar_one()
            if definition.count(CALL) != 1:
                raise RuntimeError(f'{name} does not call perceptlab_page_answered as this migration installed it')
            bind.exec_driver_sql(definition.replace(CALL, replaced))
        bind.exec_driver_sql(f'DROP FUNCTION IF EXISTS {PAGE_FUNCTION}')
