"""Prolific: prolific_study, prolific_submission and the bonus ledger prolific_bonus

server/prolific.py drives Prolific's API. It records a perceptlab study's Prolific study (its ID and
state) before the create call, Prolific's submissions as last fetched, and every bonus before any call
for it: Prolific's pay call is not idempotent, so a bonus whose pay call got no answer is settled by
reconciling against Prolific's record of the submission's bonuses, never by paying again blindly.

Revision ID: 0016_prolific
Revises: 0015_rating
Create Date: 2026-11-28 11:00:00
"""
from __future__ import annotations

from alembic import op
import sqlalchemy as sa


revision = '0016_prolific'
down_revision = '0015_rating'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('prolific_bonus',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('study_id', sa.Integer(), nullable=True),
    sa.Column('key', sa.String(length=64), nullable=False),
    sa.Column('participant_id', sa.String(length=64), nullable=False),
    sa.Column('submission_id', sa.String(length=64), nullable=False),
    sa.Column('amount', sa.String(length=16), nullable=False),
    sa.Column('reason', sa.String(length=500), nullable=False),
    sa.Column('status', sa.String(length=16), nullable=False),
    sa.Column('bulk_id', sa.String(length=64), nullable=True),
    sa.Column('note', sa.Text(), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('pay_sent_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('paid_at', sa.DateTime(timezone=True), nullable=True),
    sa.ForeignKeyConstraint(['study_id'], ['study.id'], ondelete='SET NULL'),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('key')
    )
    with op.batch_alter_table('prolific_bonus', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_prolific_bonus_bulk_id'), ['bulk_id'], unique=False)
        batch_op.create_index(batch_op.f('ix_prolific_bonus_study_id'), ['study_id'], unique=False)
        batch_op.create_index(batch_op.f('ix_prolific_bonus_submission_id'), ['submission_id'], unique=False)

    op.create_table('prolific_study',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('study_id', sa.Integer(), nullable=False),
    sa.Column('prolific_id', sa.String(length=64), nullable=True),
    sa.Column('internal_name', sa.String(length=200), nullable=False),
    sa.Column('status', sa.String(length=32), nullable=False),
    sa.Column('places', sa.Integer(), nullable=False),
    sa.Column('reward_cents', sa.Integer(), nullable=False),
    sa.Column('estimated_minutes', sa.Integer(), nullable=False),
    sa.Column('devices', sa.String(length=64), nullable=False),
    sa.Column('external_url', sa.Text(), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('updated_at', sa.DateTime(timezone=True), nullable=False),
    sa.ForeignKeyConstraint(['study_id'], ['study.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('internal_name'),
    sa.UniqueConstraint('prolific_id'),
    sa.UniqueConstraint('study_id')
    )
    op.create_table('prolific_submission',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('study_id', sa.Integer(), nullable=False),
    sa.Column('submission_id', sa.String(length=64), nullable=False),
    sa.Column('participant_id', sa.String(length=64), nullable=False),
    sa.Column('status', sa.String(length=32), nullable=False),
    sa.Column('entered_code', sa.String(length=200), nullable=False),
    sa.Column('started_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('completed_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('updated_at', sa.DateTime(timezone=True), nullable=False),
    sa.ForeignKeyConstraint(['study_id'], ['study.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('submission_id')
    )
    with op.batch_alter_table('prolific_submission', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_prolific_submission_participant_id'), ['participant_id'], unique=False)
        batch_op.create_index(batch_op.f('ix_prolific_submission_study_id'), ['study_id'], unique=False)



def downgrade() -> None:
    with op.batch_alter_table('prolific_submission', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_prolific_submission_study_id'))
        batch_op.drop_index(batch_op.f('ix_prolific_submission_participant_id'))

    op.drop_table('prolific_submission')
    op.drop_table('prolific_study')
    with op.batch_alter_table('prolific_bonus', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_prolific_bonus_submission_id'))
        batch_op.drop_index(batch_op.f('ix_prolific_bonus_study_id'))
        batch_op.drop_index(batch_op.f('ix_prolific_bonus_bulk_id'))

    op.drop_table('prolific_bonus')
