"""On PostgreSQL, autovacuum tuned for the job tables (docs/operations.md#a-hot-table-that-stays-small).

Every claim and ack leaves a dead tuple and a dead claim-index entry. With the server's
defaults a table is vacuumed once a fifth of it is dead, throttled, so a table that keeps a
retention window of done rows is vacuumed rarely and its heap and its claim index grow with
the churn between two runs. These storage parameters vacuum the job tables after a fixed
number of dead tuples, unthrottled, and keep their statistics fresh for the claim's plan.
Other databases need nothing: the migration does nothing there.
"""

from typing import Any

from django.db import migrations

TABLES = ("blamequeue_job", "blamequeue_sqs_job")

#: Vacuum after 10,000 dead tuples whatever the table's size, with no cost delay; analyse
#: after 2 % of the rows changed (the server's default is 10 %).
SETTINGS = {
    "autovacuum_vacuum_scale_factor": "0.0",
    "autovacuum_vacuum_threshold": "10000",
    "autovacuum_vacuum_cost_delay": "0",
    "autovacuum_analyze_scale_factor": "0.02",
}


def tune(apps: Any, schema_editor: Any) -> None:
    if schema_editor.connection.vendor != "postgresql":
        return
    given = ", ".join(f"{k} = {v}" for k, v in SETTINGS.items())
    for table in TABLES:
        schema_editor.execute(f"ALTER TABLE {table} SET ({given})")


def untune(apps: Any, schema_editor: Any) -> None:
    if schema_editor.connection.vendor != "postgresql":
        return
    for table in TABLES:
        schema_editor.execute(f"ALTER TABLE {table} RESET ({', '.join(SETTINGS)})")


class Migration(migrations.Migration):
    dependencies = [
        ("django_blamequeue", "0017_encrypted_view"),
    ]

    operations = [
        migrations.RunPython(tune, untune, elidable=True),
    ]
