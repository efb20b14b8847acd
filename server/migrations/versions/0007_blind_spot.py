"""Blind-spot viewing distance: the sweeps and the distance measured beside the card calibration

Revision ID: 0007_blind_spot
Revises: 0006_recruiters
Create Date: 2026-11-25 10:00:00
"""
from __future__ import annotations

from alembic import op
import sqlalchemy as sa


revision = '0007_blind_spot'
down_revision = '0006_recruiters'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('calibration', schema=None) as batch_op:
        batch_op.add_column(sa.Column('blind_spot_px', sa.JSON(), nullable=True))
        batch_op.add_column(sa.Column('measured_distance_cm', sa.Float(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('calibration', schema=None) as batch_op:
        batch_op.drop_column('measured_distance_cm')
        batch_op.drop_column('blind_spot_px')
