"""vote.playback: a video paired-comparison trial's playback log (server/paradigms/media.py)

A vote on two video clips carries the browser's playback log of the trial (its clips summed: presented and
dropped frames, stall and start delay in ms, replays, the wall time of playback, the drift between the clips
played together, and any failure); images have none (NULL). The one-statement vote function (vote.sql) is
unchanged: a vote with a playback log takes the regular path.

Revision ID: 0023_paired_playback
Revises: 0022_rating_playback
Create Date: 2026-12-07 12:10:00
"""
from __future__ import annotations

from alembic import op
import sqlalchemy as sa


revision = '0023_paired_playback'
down_revision = '0022_rating_playback'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("vote") as batch:
        batch.add_column(sa.Column("playback", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("vote") as batch:
        batch.drop_column("playback")
