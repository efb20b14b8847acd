"""vote: no index on assignment_id or worker_id (five indexes instead of seven per vote)

Every vote writes one entry in each of the vote table's indexes, in the vote's transaction. No query
looks votes up by assignment or by worker alone: the ones that read these columns select a study's
votes first (by study_id, which keeps its index: exports, the dashboard's figures, participants, time on
task) and group or join from there. The trial's unique key, the client's vote ID, the study and the
pair (active sampling and pilot counts look votes up by pair) keep theirs.

Revision ID: 0025_vote_fewer_indexes
Revises: 0024_entry_fingerprints
Create Date: 2026-12-07 20:50:00
"""
from __future__ import annotations

from alembic import op


revision = '0025_vote_fewer_indexes'
down_revision = '0024_entry_fingerprints'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.drop_index("ix_vote_assignment_id", table_name="vote")
    op.drop_index("ix_vote_worker_id", table_name="vote")


def downgrade() -> None:
    op.create_index("ix_vote_worker_id", "vote", ["worker_id"])
    op.create_index("ix_vote_assignment_id", "vote", ["assignment_id"])
