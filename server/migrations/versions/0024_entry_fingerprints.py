"""worker.address_group, worker.agent_group: entry fingerprints (server/fingerprints.py)

At a worker's first entry the server stores keyed hashes of the client's network (/24, /48) and of its
User-Agent, never the raw values; the sock-puppet analysis reads them from workers.csv. Earlier workers have
none (NULL: they match nothing).

Revision ID: 0024_entry_fingerprints
Revises: 0023_paired_playback
Create Date: 2026-12-07 12:10:00
"""
from __future__ import annotations

from alembic import op
import sqlalchemy as sa


revision = '0024_entry_fingerprints'
down_revision = '0023_paired_playback'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("worker") as batch:
        batch.add_column(sa.Column("address_group", sa.String(length=16), nullable=True))
        batch.add_column(sa.Column("agent_group", sa.String(length=16), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("worker") as batch:
        batch.drop_column("agent_group")
        batch.drop_column("address_group")
