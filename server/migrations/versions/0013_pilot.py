"""Pilot participants: Worker.pilot, Worker.simulated and Assignment.pilot

A pilot participant (the experimenter's preview, a colleague's test run, a worker marked with
``perceptlab study pilot``) or a simulated one (``perceptlab simulate``) takes part like anyone, but
counts for nothing: no time estimate, wage, payment plan, MTurk or Prolific action, dashboard
figure or pair target counts their work, and exports leave them out unless asked
(server/pilot.py). Assignment.pilot copies its worker's flag, so that a vote, which reads only its
locked assignment row, knows whether to count in its pair's target.

Existing participants are not pilots.

Revision ID: 0013_pilot
Revises: 0012_terminal_stages
Create Date: 2026-11-28 08:00:00
"""
from __future__ import annotations

from alembic import op
import sqlalchemy as sa


revision = '0013_pilot'
down_revision = '0012_terminal_stages'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('worker', schema=None) as batch_op:
        batch_op.add_column(sa.Column('pilot', sa.Boolean(), server_default=sa.false(), nullable=False))
        batch_op.add_column(sa.Column('simulated', sa.Boolean(), server_default=sa.false(), nullable=False))
    with op.batch_alter_table('assignment', schema=None) as batch_op:
        batch_op.add_column(sa.Column('pilot', sa.Boolean(), server_default=sa.false(), nullable=False))


def downgrade() -> None:
    with op.batch_alter_table('assignment', schema=None) as batch_op:
        batch_op.drop_column('pilot')
    with op.batch_alter_table('worker', schema=None) as batch_op:
        batch_op.drop_column('simulated')
        batch_op.drop_column('pilot')
