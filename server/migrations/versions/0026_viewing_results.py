"""viewing_result: each worker's [viewing] checks at entry (server/paradigms/viewing.py)

One row per worker and check (brightness, colour, distance, acuity, and the card's screen measure): the answers
given, errors of items, passed, and what was measured.

Revision ID: 0026_viewing_results
Revises: 0025_vote_fewer_indexes
Create Date: 2026-12-08 03:00:00
"""
from __future__ import annotations

from alembic import op
import sqlalchemy as sa


revision = '0026_viewing_results'
down_revision = '0025_vote_fewer_indexes'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "viewing_result",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("study_id", sa.Integer(), nullable=False),
        sa.Column("worker_id", sa.Integer(), nullable=False),
        sa.Column("check", sa.String(length=16), nullable=False),
        sa.Column("answers", sa.JSON(), nullable=False),
        sa.Column("errors", sa.Integer(), nullable=False),
        sa.Column("items", sa.Integer(), nullable=False),
        sa.Column("passed", sa.Boolean(), nullable=False),
        sa.Column("measures", sa.JSON(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["study_id"], ["study.id"], ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["worker_id"], ["worker.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("worker_id", "check"),
    )
    op.create_index("ix_viewing_result_study_id", "viewing_result", ["study_id"])


def downgrade() -> None:
    op.drop_index("ix_viewing_result_study_id", table_name="viewing_result")
    op.drop_table("viewing_result")
