"""rating_response.playback: a video trial's playback log (server/paradigms/media.py)

A rating of a video clip carries the browser's playback log (presented and dropped frames, stall and start
delay in ms, replays, the wall time of playback and any failure); images have none (NULL). The one-statement
rating function (rating.sql) is unchanged: a rating with a playback log takes the regular path.

Revision ID: 0022_rating_playback
Revises: 0021_payment_claims
Create Date: 2026-12-07 03:40:00
"""
from __future__ import annotations

from alembic import op
import sqlalchemy as sa


revision = '0022_rating_playback'
down_revision = '0021_payment_claims'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("rating_response") as batch:
        batch.add_column(sa.Column("playback", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("rating_response") as batch:
        batch.drop_column("playback")
