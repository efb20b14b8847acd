"""Leaner rows on the vote path: no foreign keys on copied columns, updates that stay HOT

A vote's ``assignment_id``, ``worker_id``, ``study_id``, ``pair_id`` and ``winner_id`` (and a
trial's ``assignment_id`` and ``worker_id``, a gold result's ``worker_id`` and ``assignment_id``)
are copies, written by the server from the rows they hang off: the vote from its trial, the trial
from its page. Their integrity is the foreign key of that row (vote -> trial -> page ->
assignment, each ON DELETE CASCADE, so deleting a study, worker or assignment still deletes its
trials and votes). Checking each copy again cost every inserted vote five row locks on
PostgreSQL (``FOR KEY SHARE`` of its study, worker, assignment, pair and winner: the study row,
shared by every vote of the study, turns them into multixacts under concurrency) and every page
start forty. Those foreign keys go; the indexes on the columns stay.

Updates on the vote path no longer touch an index, so PostgreSQL can do them in place (HOT: no new
index entries): a vote marks its trial answered (``ix_trial_open`` indexed only unanswered trials,
so the flag was part of an index; it becomes the plain ``ix_trial_pair_id``) and renews its page
(``ix_page_held`` was keyed on ``reserved_until``; it is now keyed on ``assignment_id``, still only
over held pages, which are about one per active worker). ``ix_trial_page_id`` duplicated the
leading column of the unique ``(page_id, position)`` key and goes. On PostgreSQL the trial and
page tables keep 15 % of each heap page free for those updates (fillfactor 85).

Revision ID: 0010_lean_vote_rows
Revises: 0009_vote_function
Create Date: 2026-11-27 13:30:00
"""
from __future__ import annotations

from alembic import op
import sqlalchemy as sa


revision = '0010_lean_vote_rows'
down_revision = '0009_vote_function'
branch_labels = None
depends_on = None

# (table, column, referred table, ON DELETE)
COPIED_KEYS = [
    ('vote', 'assignment_id', 'assignment', 'CASCADE'),
    ('vote', 'worker_id', 'worker', 'CASCADE'),
    ('vote', 'study_id', 'study', 'CASCADE'),
    ('vote', 'pair_id', 'pair', None),
    ('vote', 'winner_id', 'stimulus', None),
    ('trial', 'assignment_id', 'assignment', 'CASCADE'),
    ('trial', 'worker_id', 'worker', 'CASCADE'),
    ('gold_result', 'worker_id', 'worker', 'CASCADE'),
    ('gold_result', 'assignment_id', 'assignment', 'CASCADE'),
]
# SQLite's foreign keys have no names: batch mode finds them by this convention.
SQLITE_NAMES = {'fk': 'fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s'}
TABLES = ('vote', 'trial', 'gold_result')


def _name(table: str, column: str, referred: str, postgresql: bool) -> str:
    return f'{table}_{column}_fkey' if postgresql else f'fk_{table}_{column}_{referred}'


def _batch(table: str, postgresql: bool):
    return op.batch_alter_table(table, naming_convention=None if postgresql else SQLITE_NAMES)


def upgrade() -> None:
    postgresql = op.get_bind().dialect.name == 'postgresql'
    for table in TABLES:
        with _batch(table, postgresql) as batch_op:
            for name, column, referred, _ in COPIED_KEYS:
                if name == table:
                    batch_op.drop_constraint(_name(table, column, referred, postgresql), type_='foreignkey')
            if table == 'trial':
                batch_op.drop_index('ix_trial_open', postgresql_where=sa.text('NOT answered'),
                                    sqlite_where=sa.text('NOT answered'))
                batch_op.drop_index('ix_trial_page_id')
                batch_op.create_index('ix_trial_pair_id', ['pair_id'], unique=False)
    with op.batch_alter_table('page', schema=None) as batch_op:
        batch_op.drop_index('ix_page_held', postgresql_where=sa.text('held'), sqlite_where=sa.text('held'))
        batch_op.create_index('ix_page_held', ['assignment_id'], unique=False, postgresql_where=sa.text('held'),
                              sqlite_where=sa.text('held'))
    if postgresql:
        op.execute('ALTER TABLE trial SET (fillfactor = 85)')
        op.execute('ALTER TABLE page SET (fillfactor = 85)')


def downgrade() -> None:
    postgresql = op.get_bind().dialect.name == 'postgresql'
    if postgresql:
        op.execute('ALTER TABLE trial RESET (fillfactor)')
        op.execute('ALTER TABLE page RESET (fillfactor)')
    with op.batch_alter_table('page', schema=None) as batch_op:
        batch_op.drop_index('ix_page_held', postgresql_where=sa.text('held'), sqlite_where=sa.text('held'))
        batch_op.create_index('ix_page_held', ['reserved_until'], unique=False, postgresql_where=sa.text('held'),
                              sqlite_where=sa.text('held'))
    for table in TABLES:
        with _batch(table, postgresql) as batch_op:
            if table == 'trial':
                batch_op.drop_index('ix_trial_pair_id')
                batch_op.create_index('ix_trial_page_id', ['page_id'], unique=False)
                batch_op.create_index('ix_trial_open', ['pair_id'], unique=False,
                                      postgresql_where=sa.text('NOT answered'), sqlite_where=sa.text('NOT answered'))
            for name, column, referred, ondelete in COPIED_KEYS:
                if name == table:
                    batch_op.create_foreign_key(_name(table, column, referred, postgresql), referred, [column],
                                                ['id'], ondelete=ondelete)
