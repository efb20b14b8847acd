"""worker.locale: the language a worker's pages are shown in (server/i18n.py)

Chosen at entry among the study's [study] languages (?lang=, the recruiter's ?locale=, Accept-Language, the
study's default) and kept for the worker's later pages; exported as workers.csv's ``locale``. Earlier workers
have none (NULL: their pages are in the study's default language).

Revision ID: 0028_worker_locale
Revises: 0027_display_monitor
Create Date: 2026-12-08 02:40:00
"""
from __future__ import annotations

from alembic import op
import sqlalchemy as sa


revision = '0028_worker_locale'
down_revision = '0027_display_monitor'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("worker") as batch:
        batch.add_column(sa.Column("locale", sa.String(length=16), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("worker") as batch:
        batch.drop_column("locale")
