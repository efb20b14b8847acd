"""reason codes (worker, assignment, entry_refusal) and questionnaire answers

Every turn-away, stop and failed check has a code of server/reasons.py: a worker's record keeps it with the
arguments of its message (``status_reason_code``, ``status_reason_args``), an ended assignment its own
(``reason_code``, ``reason_args``: a refused display or a full study end one assignment, not the worker),
and entries refused before any participant exists are counted per study and code (``entry_refusal``: one
row each, however many refusals). ``questionnaire_response`` holds a worker's answers to the study's pre-
or post-task questionnaire, one row per assignment and part.

Revision ID: 0029_reasons_questionnaires
Revises: 0028_worker_locale
Create Date: 2026-12-08 02:40:00
"""
from __future__ import annotations

from alembic import op
import sqlalchemy as sa


revision = '0029_reasons_questionnaires'
down_revision = '0028_worker_locale'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("worker") as batch:
        batch.add_column(sa.Column("status_reason_code", sa.String(length=40), nullable=True))
        batch.add_column(sa.Column("status_reason_args", sa.JSON(), nullable=True))
    with op.batch_alter_table("assignment") as batch:
        batch.add_column(sa.Column("reason_code", sa.String(length=40), nullable=True))
        batch.add_column(sa.Column("reason_args", sa.JSON(), nullable=True))
    op.create_table(
        "entry_refusal",
        sa.Column("study_id", sa.Integer(), sa.ForeignKey("study.id", ondelete="CASCADE"), nullable=False),
        sa.Column("code", sa.String(length=40), nullable=False),
        sa.Column("count", sa.Integer(), nullable=False),
        sa.Column("last_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("study_id", "code"),
    )
    op.create_table(
        "questionnaire_response",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("study_id", sa.Integer(), sa.ForeignKey("study.id", ondelete="CASCADE"), nullable=False),
        sa.Column("worker_id", sa.Integer(), sa.ForeignKey("worker.id", ondelete="CASCADE"), nullable=False),
        sa.Column("assignment_id", sa.Integer(), sa.ForeignKey("assignment.id", ondelete="CASCADE"), nullable=False),
        sa.Column("part", sa.String(length=8), nullable=False),
        sa.Column("answers", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.UniqueConstraint("assignment_id", "part"),
    )
    op.create_index("ix_questionnaire_response_study_id", "questionnaire_response", ["study_id"])


def downgrade() -> None:
    op.drop_index("ix_questionnaire_response_study_id", table_name="questionnaire_response")
    op.drop_table("questionnaire_response")
    op.drop_table("entry_refusal")
    with op.batch_alter_table("assignment") as batch:
        batch.drop_column("reason_args")
        batch.drop_column("reason_code")
    with op.batch_alter_table("worker") as batch:
        batch.drop_column("status_reason_args")
        batch.drop_column("status_reason_code")
