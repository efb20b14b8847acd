"""The rating paradigm (kind "rating": ACR, DCR, CCR): its stimuli, trials, responses and gold results
(server/paradigms/rating/models.py)

Revision ID: 0015_rating
Revises: 0014_paired_vote_sql
Create Date: 2026-11-28 11:00:00
"""
from __future__ import annotations

from alembic import op
import sqlalchemy as sa


revision = '0015_rating'
down_revision = '0014_paired_vote_sql'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        'rating_stimulus',
        sa.Column('id', sa.Integer(), nullable=False),
        sa.Column('study_id', sa.Integer(), nullable=False),
        sa.Column('scene', sa.String(length=200), nullable=False),
        sa.Column('item_id', sa.String(length=200), nullable=False),
        sa.Column('role', sa.String(length=16), nullable=False),
        sa.Column('path', sa.Text(), nullable=False),
        sa.Column('reference_path', sa.Text(), nullable=False),
        sa.Column('width', sa.Integer(), nullable=False),
        sa.Column('height', sa.Integer(), nullable=False),
        sa.Column('target_ratings', sa.Integer(), nullable=False),
        sa.Column('is_gold', sa.Boolean(), server_default=sa.false(), nullable=False),
        sa.ForeignKeyConstraint(['study_id'], ['study.id'], ondelete='CASCADE'),
        sa.PrimaryKeyConstraint('id'),
        sa.UniqueConstraint('study_id', 'scene', 'item_id'),
    )
    with op.batch_alter_table('rating_stimulus', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_rating_stimulus_study_id'), ['study_id'], unique=False)

    op.create_table(
        'rating_trial',
        sa.Column('id', sa.Integer(), nullable=False),
        sa.Column('page_id', sa.Integer(), nullable=False),
        sa.Column('assignment_id', sa.Integer(), nullable=False),
        sa.Column('worker_id', sa.Integer(), nullable=False),
        sa.Column('position', sa.Integer(), nullable=False),
        sa.Column('stimulus_id', sa.Integer(), nullable=False),
        sa.Column('reference_first', sa.Boolean(), nullable=False),
        sa.Column('is_gold', sa.Boolean(), nullable=False),
        sa.Column('is_quiz', sa.Boolean(), nullable=False),
        sa.Column('answered', sa.Boolean(), nullable=False),
        sa.ForeignKeyConstraint(['page_id'], ['page.id'], ondelete='CASCADE'),
        sa.ForeignKeyConstraint(['stimulus_id'], ['rating_stimulus.id']),
        sa.PrimaryKeyConstraint('id'),
        sa.UniqueConstraint('page_id', 'position'),
    )
    with op.batch_alter_table('rating_trial', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_rating_trial_assignment_id'), ['assignment_id'], unique=False)
        batch_op.create_index(batch_op.f('ix_rating_trial_worker_id'), ['worker_id'], unique=False)
        batch_op.create_index('ix_rating_trial_stimulus_id', ['stimulus_id'], unique=False)

    op.create_table(
        'rating_response',
        sa.Column('id', sa.Integer(), nullable=False),
        sa.Column('client_rating_id', sa.String(length=36), nullable=False),
        sa.Column('trial_id', sa.Integer(), nullable=False),
        sa.Column('assignment_id', sa.Integer(), nullable=False),
        sa.Column('worker_id', sa.Integer(), nullable=False),
        sa.Column('study_id', sa.Integer(), nullable=False),
        sa.Column('stimulus_id', sa.Integer(), nullable=False),
        sa.Column('raw_rating', sa.Float(), nullable=False),
        sa.Column('rating', sa.Float(), nullable=False),
        sa.Column('rt_ms', sa.Float(), nullable=False),
        sa.Column('created_at', sa.DateTime(timezone=True), server_default=sa.text('(CURRENT_TIMESTAMP)'),
                  nullable=False),
        sa.ForeignKeyConstraint(['trial_id'], ['rating_trial.id'], ondelete='CASCADE'),
        sa.PrimaryKeyConstraint('id'),
        sa.UniqueConstraint('client_rating_id'),
        sa.UniqueConstraint('trial_id'),
    )
    with op.batch_alter_table('rating_response', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_rating_response_assignment_id'), ['assignment_id'], unique=False)
        batch_op.create_index(batch_op.f('ix_rating_response_stimulus_id'), ['stimulus_id'], unique=False)
        batch_op.create_index(batch_op.f('ix_rating_response_study_id'), ['study_id'], unique=False)
        batch_op.create_index(batch_op.f('ix_rating_response_worker_id'), ['worker_id'], unique=False)

    op.create_table(
        'rating_gold_result',
        sa.Column('id', sa.Integer(), nullable=False),
        sa.Column('response_id', sa.Integer(), nullable=False),
        sa.Column('worker_id', sa.Integer(), nullable=False),
        sa.Column('assignment_id', sa.Integer(), nullable=False),
        sa.Column('is_quiz', sa.Boolean(), nullable=False),
        sa.Column('correct', sa.Boolean(), nullable=False),
        sa.ForeignKeyConstraint(['response_id'], ['rating_response.id'], ondelete='CASCADE'),
        sa.PrimaryKeyConstraint('id'),
        sa.UniqueConstraint('response_id'),
    )
    with op.batch_alter_table('rating_gold_result', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_rating_gold_result_assignment_id'), ['assignment_id'], unique=False)
        batch_op.create_index(batch_op.f('ix_rating_gold_result_worker_id'), ['worker_id'], unique=False)


def downgrade() -> None:
    op.drop_table('rating_gold_result')
    op.drop_table('rating_response')
    op.drop_table('rating_trial')
    op.drop_table('rating_stimulus')
