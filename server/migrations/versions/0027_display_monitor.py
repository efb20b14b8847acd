"""worker.display_changes, worker.paused_ms, display_event: display changes during trials

The display monitor (server/paradigms/display_monitor.py) pauses a trial when the zoom, the screen or the
window changes; each pause and resumption is a display_event row (its browser-made event_id unique per
assignment, so a retried post counts once), and the worker's row keeps the totals that [viewing]
max_display_changes is checked against and workers.csv exports. Earlier workers have 0.

Revision ID: 0027_display_monitor
Revises: 0026_viewing_results
Create Date: 2026-12-08 03:00:00
"""
from __future__ import annotations

from alembic import op
import sqlalchemy as sa


revision = '0027_display_monitor'
down_revision = '0026_viewing_results'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("worker") as batch:
        batch.add_column(sa.Column("display_changes", sa.Integer(), server_default=sa.text("0"), nullable=False))
        batch.add_column(sa.Column("paused_ms", sa.BigInteger(), server_default=sa.text("0"), nullable=False))
    op.create_table(
        "display_event",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("assignment_id", sa.Integer(), nullable=False),
        sa.Column("event_id", sa.String(length=64), nullable=False),
        sa.Column("event", sa.String(length=16), nullable=False),
        sa.Column("change", sa.String(length=16), nullable=True),
        sa.Column("paused_ms", sa.BigInteger(), nullable=False),
        sa.Column("window", sa.JSON(), nullable=True),
        sa.Column("screen", sa.JSON(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["assignment_id"], ["assignment.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("assignment_id", "event_id"),
    )


def downgrade() -> None:
    op.drop_table("display_event")
    with op.batch_alter_table("worker") as batch:
        batch.drop_column("paused_ms")
        batch.drop_column("display_changes")
