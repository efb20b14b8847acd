"""Recruiters: the recruiter's URL parameters stored with each assignment (Prolific's STUDY_ID, SESSION_ID)

Revision ID: 0006_recruiters
Revises: 0005_allocation
Create Date: 2026-11-23 10:00:00
"""
from __future__ import annotations

from alembic import op
import sqlalchemy as sa


revision = '0006_recruiters'
down_revision = '0005_allocation'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('assignment', schema=None) as batch_op:
        batch_op.add_column(sa.Column('entry_params', sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('assignment', schema=None) as batch_op:
        batch_op.drop_column('entry_params')
