"""Admission gate: new workers are let in at a rate shared by every server process

One row per gate (``workers``): when its next token is issued, the latest retry time told to a
deferred caller, and what the last call decided (server/paradigms/entry.py). A gate in each
process's memory counted per process, and a burst reaches the processes unevenly (each accepts
its own connections, and a retry comes back over the same one), so some workers waited several
times as long as others.

Revision ID: 0011_admission_gate
Revises: 0010_lean_vote_rows
Create Date: 2026-11-27 15:45:00
"""
from __future__ import annotations

from alembic import op
import sqlalchemy as sa


revision = '0011_admission_gate'
down_revision = '0010_lean_vote_rows'
branch_labels = None
depends_on = None


def upgrade() -> None:
    admission = op.create_table(
        'admission',
        sa.Column('name', sa.String(length=32), nullable=False),
        sa.Column('next_free', sa.Float(), nullable=False),
        sa.Column('promised', sa.Float(), nullable=False),
        sa.Column('last_admitted', sa.Boolean(), nullable=False),
        sa.PrimaryKeyConstraint('name'),
    )
    op.bulk_insert(admission, [{'name': 'workers', 'next_free': 0.0, 'promised': 0.0, 'last_admitted': False}])


def downgrade() -> None:
    op.drop_table('admission')
