"""Fair allocation: short renewable page reservations, per-study participant-link secrets

Revision ID: 0005_allocation
Revises: 0004_accounts
Create Date: 2026-11-22 09:00:00
"""
from __future__ import annotations

import datetime as dt
import secrets

from alembic import op
import sqlalchemy as sa


revision = '0005_allocation'
down_revision = '0004_accounts'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('page', schema=None) as batch_op:
        batch_op.add_column(sa.Column('reserved_until', sa.DateTime(timezone=True), nullable=True))
    with op.batch_alter_table('study', schema=None) as batch_op:
        batch_op.add_column(sa.Column('entry_secret', sa.String(length=64), nullable=True))
    # Existing studies get their own random link key, like new ones (a server-side default could
    # only give them all the same value).
    connection = op.get_bind()
    study = sa.table('study', sa.column('id', sa.Integer), sa.column('entry_secret', sa.String))
    for (study_id,) in connection.execute(sa.select(study.c.id)).all():
        connection.execute(study.update().where(study.c.id == study_id)
                           .values(entry_secret=secrets.token_hex(32)))
    # Pages of trials still open when this version is installed keep their pairs for a few minutes,
    # then return them to the pool like any abandoned page.
    page = sa.table('page', sa.column('kind', sa.String), sa.column('completed_at', sa.DateTime(timezone=True)),
                    sa.column('reserved_until', sa.DateTime(timezone=True)))
    soon = dt.datetime.now(dt.timezone.utc) + dt.timedelta(minutes=5)
    connection.execute(page.update().where(page.c.kind.in_(('trials', 'main')), page.c.completed_at.is_(None))
                       .values(reserved_until=soon))


def downgrade() -> None:
    with op.batch_alter_table('study', schema=None) as batch_op:
        batch_op.drop_column('entry_secret')
    with op.batch_alter_table('page', schema=None) as batch_op:
        batch_op.drop_column('reserved_until')
