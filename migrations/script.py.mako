"""${message}

Revision ID: ${up_revision}
Revises: ${down_revision | comma,n}

Hand-written SQL through `op.execute`; every revision has a working downgrade (a test runs
upgrade head -> downgrade base -> upgrade head on a real PostgreSQL).
"""

from __future__ import annotations

from alembic import op

revision = ${repr(up_revision)}
down_revision = ${repr(down_revision)}
branch_labels = ${repr(branch_labels)}
depends_on = ${repr(depends_on)}

UPGRADE = """
"""

DOWNGRADE = """
"""


def upgrade() -> None:
    op.execute(UPGRADE)


def downgrade() -> None:
    op.execute(DOWNGRADE)
