"""Held work counted per pair: Pair.n_held and Page.held

Choosing a page's pairs used to count every unanswered trial of the study on a page whose
reservation holds (per page start: work that grows with the workers active at once). Now each
pair keeps the count of its unanswered trials on held pages (Pair.n_held), and only the few held
pages whose reservation lapsed are counted at query time, until they are retired
(server/allocation.py).

Pages of trials not completed when this version is installed are held (lapsed ones too: they are
subtracted at query time like any lapsed page, and retired at the next page start).

Revision ID: 0008_held_pairs
Revises: 0007_blind_spot
Create Date: 2026-11-27 12:00:00
"""
from __future__ import annotations

from alembic import op
import sqlalchemy as sa


revision = '0008_held_pairs'
down_revision = '0007_blind_spot'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('page', schema=None) as batch_op:
        batch_op.add_column(sa.Column('held', sa.Boolean(), server_default=sa.false(), nullable=False))
        batch_op.create_index('ix_page_held', ['reserved_until'], unique=False, postgresql_where=sa.text('held'),
                              sqlite_where=sa.text('held'))
    with op.batch_alter_table('pair', schema=None) as batch_op:
        batch_op.add_column(sa.Column('n_held', sa.Integer(), server_default='0', nullable=False))
    op.execute("UPDATE page SET held = TRUE WHERE kind = 'trials' AND reserved_until IS NOT NULL "
               "AND completed_at IS NULL")
    op.execute("UPDATE pair SET n_held = (SELECT count(*) FROM trial JOIN page ON trial.page_id = page.id "
               "WHERE trial.pair_id = pair.id AND page.held AND NOT trial.answered AND NOT trial.is_gold)")


def downgrade() -> None:
    with op.batch_alter_table('pair', schema=None) as batch_op:
        batch_op.drop_column('n_held')
    with op.batch_alter_table('page', schema=None) as batch_op:
        batch_op.drop_index('ix_page_held', postgresql_where=sa.text('held'), sqlite_where=sa.text('held'))
        batch_op.drop_column('held')
