"""[stopping] units: keep the meaning of paired-comparison targets stored before the key existed

Until this revision a paired-comparison study's ``[stopping] halfwidth`` was measured in anchored units (each
set's virtual worst anchor 0, best 1); the key ``units`` now names the unit and defaults to JOD. A study stored
before it has no ``units`` in its config, so without this revision its target would silently be read as JOD
(about ten times stricter). Its config gets ``units = "anchored"``, the unit it was launched with; rating
studies (MOS points, the only unit they have) and studies without a target are left alone.

Revision ID: 0020_stopping_units
Revises: 0019_shared_page_sql
Create Date: 2026-11-28 14:40:00
"""
from __future__ import annotations

from alembic import op
import sqlalchemy as sa


revision = '0020_stopping_units'
down_revision = '0019_shared_page_sql'
branch_labels = None
depends_on = None

# The paired-comparison kind, and the stored kind of a config that names none (server/paradigms/__init__.py).
PAIRED_KINDS = ("pc", None)
STUDY = sa.table("study", sa.column("id", sa.Integer), sa.column("config", sa.JSON))


def _paired_targets(connection):
    """(id, config) of the paired studies whose config has a half-width target but no ``units``."""
    for study_id, config in connection.execute(sa.select(STUDY.c.id, STUDY.c.config)).all():
        if (isinstance(config, dict) and config.get("kind") in PAIRED_KINDS and "units" not in config
                and float(config.get("halfwidth") or 0) > 0):
            yield study_id, config


def upgrade() -> None:
    connection = op.get_bind()
    for study_id, config in list(_paired_targets(connection)):
        connection.execute(STUDY.update().where(STUDY.c.id == study_id).values(config={**config, "units": "anchored"}))


def downgrade() -> None:
    # The key is harmless to the code before this revision (a stored config's unknown keys are ignored), so it stays:
    # removing it would also strip it from studies that chose "anchored" after this revision.
    pass
