"""Payment claims: every payment row is claimed under a lock before the call that moves money

Two runs of ``perceptlab prolific bonus`` (or ``mturk bonus``, or an approval) at once could each read a bonus
as due and each pay it: nothing locked the rows between reading them and committing the next state. Each
payment path now claims its rows with one conditional UPDATE (``... WHERE status = <the state read>``, a
fresh ``claim`` token), committed before it calls out; only the run whose token is on the rows goes on. A run
that died between its claim and its call leaves the claim behind; the reconcile path settles it against the
platform's own record (server/claims.py).

Each of prolific_bonus, mturk_bonus, prolific_submission (a bulk approval asked for, which Prolific carries out
asynchronously) and mturk_assignment (an approval being sent) gets ``claim`` (the token of the run that holds
the row) and ``claimed_at``.

Revision ID: 0021_payment_claims
Revises: 0020_stopping_units
Create Date: 2026-12-07 03:00:00
"""
from __future__ import annotations

from alembic import op
import sqlalchemy as sa


revision = '0021_payment_claims'
down_revision = '0020_stopping_units'
branch_labels = None
depends_on = None


TABLES = ('prolific_bonus', 'mturk_bonus', 'prolific_submission', 'mturk_assignment')


def upgrade() -> None:
    for table in TABLES:
        with op.batch_alter_table(table, schema=None) as batch_op:
            batch_op.add_column(sa.Column('claim', sa.String(length=32), nullable=True))
            batch_op.add_column(sa.Column('claimed_at', sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    for table in reversed(TABLES):
        with op.batch_alter_table(table, schema=None) as batch_op:
            batch_op.drop_column('claimed_at')
            batch_op.drop_column('claim')
