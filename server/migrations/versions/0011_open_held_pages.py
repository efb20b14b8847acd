"""ix_page_held covers only open held pages: a page leaves it when it is complete

A held page counts its unanswered real trials in their pairs' ``n_held`` until a page start
retires it after its reservation lapsed. A complete page has no unanswered trial left, yet it stayed
in ``ix_page_held`` (and was retired minutes later for nothing), so the index held every page of
the last few minutes, not about one per active worker. The lapsed-page queries
(server/allocation.py) now ask for open held pages only, and the index covers just those.

Revision ID: 0011_open_held_pages
Revises: 0010_lean_vote_rows
Create Date: 2026-11-27 20:00:00
"""
from __future__ import annotations

from alembic import op
import sqlalchemy as sa


revision = '0011_open_held_pages'
down_revision = '0010_lean_vote_rows'
branch_labels = None
depends_on = None

OPEN_HELD = 'held AND completed_at IS NULL'


def _recreate(where: str) -> None:
    with op.batch_alter_table('page', schema=None) as batch_op:
        batch_op.drop_index('ix_page_held')
        batch_op.create_index('ix_page_held', ['assignment_id'], unique=False, postgresql_where=sa.text(where),
                              sqlite_where=sa.text(where))


def upgrade() -> None:
    _recreate(OPEN_HELD)


def downgrade() -> None:
    _recreate('held')
