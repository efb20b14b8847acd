"""Stopping rules: study_stopping, what [stopping] decided for a study

server/stopping.py records the latest precision measured against a study's [stopping] target, and once the
target is met or a budget cap reached, why and when the study stopped taking new participants (its status
becomes "stopped") and when MTurk and Prolific were told (written before each call, so a crash never repeats it).

Revision ID: 0018_stopping
Revises: 0017_rating_sql
Create Date: 2026-11-28 12:30:00
"""
from __future__ import annotations

from alembic import op
import sqlalchemy as sa


revision = '0018_stopping'
down_revision = '0017_rating_sql'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('study_stopping',
    sa.Column('study_id', sa.Integer(), nullable=False),
    sa.Column('checked_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('measured', sa.JSON(), nullable=True),
    sa.Column('reason', sa.String(length=32), nullable=True),
    sa.Column('message', sa.Text(), nullable=True),
    sa.Column('stopped_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('notify_only', sa.Boolean(), server_default=sa.false(), nullable=False),
    sa.Column('at_stop', sa.JSON(), nullable=True),
    sa.Column('mturk_told_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('prolific_told_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('recruiter_note', sa.Text(), nullable=True),
    sa.Column('projection', sa.JSON(), nullable=True),
    sa.Column('forecast', sa.JSON(), nullable=True),
    sa.Column('forecast_at', sa.DateTime(timezone=True), nullable=True),
    sa.ForeignKeyConstraint(['study_id'], ['study.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('study_id'),
    )


def downgrade() -> None:
    op.drop_table('study_stopping')
