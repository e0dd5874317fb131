"""The console (docs/admin.md): per-attempt history, chart buckets, the bulk actions'
permissions, and on PostgreSQL the function that reads a JSON payload for searches by
argument (docs/indexes.md#searching-by-argument says how to index it)."""

from typing import Any

from django.db import migrations, models

#: A job's payload as ``jsonb`` when it is JSON, else NULL; never raises (a payload that
#: ``jsonb`` refuses reads as NULL), so an expression index on it can never fail an enqueue.
#: PARALLEL UNSAFE (the default, said out loud): its exception block is a subtransaction,
#: which no process may start while a query runs in parallel mode — not even the leader.
PAYLOAD_JSON = """
CREATE OR REPLACE FUNCTION blamequeue_payload_json(payload bytea, content_type varchar)
RETURNS jsonb LANGUAGE plpgsql IMMUTABLE PARALLEL UNSAFE AS $$
BEGIN
    IF content_type IS DISTINCT FROM 'application/json' THEN
        RETURN NULL;
    END IF;
    RETURN convert_from(payload, 'UTF8')::jsonb;
EXCEPTION WHEN others THEN
    RETURN NULL;
END
$$
"""


def create_function(apps: Any, schema_editor: Any) -> None:
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(PAYLOAD_JSON)


def drop_function(apps: Any, schema_editor: Any) -> None:
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute("DROP FUNCTION IF EXISTS blamequeue_payload_json(bytea, varchar)")


class Migration(migrations.Migration):
    dependencies = [
        ("django_blamequeue", "0011_error_type"),
    ]

    operations = [
        migrations.RunPython(create_function, drop_function),
        migrations.AlterModelOptions(
            name="job",
            options={
                "ordering": ["-priority", "available_at", "id"],
                "permissions": [
                    ("retry_job", "Can retry jobs from the dead-letter queue"),
                    ("purge_queue", "Can purge a queue's waiting jobs"),
                    ("cancel_job", "Can cancel jobs"),
                    ("move_job", "Can move jobs to another queue"),
                    ("reprioritize_job", "Can change jobs' priority"),
                ],
            },
        ),
        migrations.CreateModel(
            name="JobAttempt",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("backend", models.CharField(max_length=100)),
                ("job_id", models.CharField(max_length=26)),
                ("attempt", models.PositiveIntegerField()),
                ("outcome", models.CharField(max_length=20)),
                ("worker", models.CharField(blank=True, max_length=255, null=True)),
                ("started_at", models.DateTimeField(blank=True, null=True)),
                ("finished_at", models.DateTimeField()),
                ("reason", models.CharField(blank=True, max_length=30, null=True)),
                ("error_type", models.CharField(blank=True, max_length=255, null=True)),
                ("error", models.TextField(blank=True, null=True)),
                ("traceback", models.TextField(blank=True, null=True)),
            ],
            options={
                "db_table": "blamequeue_attempt",
                "default_permissions": (),
                "indexes": [
                    models.Index(models.F("job_id"), models.F("id"), name="bq_attempt_job"),
                    models.Index(models.F("finished_at"), name="bq_attempt_finished"),
                ],
            },
        ),
        migrations.CreateModel(
            name="TimeBucket",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("backend", models.CharField(max_length=100)),
                ("queue", models.CharField(max_length=200)),
                ("name", models.CharField(default="", max_length=255)),
                ("step", models.PositiveIntegerField()),
                ("start", models.DateTimeField()),
                ("done", models.PositiveIntegerField(default=0)),
                ("failed", models.PositiveIntegerField(default=0)),
                ("retried", models.PositiveIntegerField(default=0)),
                ("cancelled", models.PositiveIntegerField(default=0)),
                ("depth", models.PositiveIntegerField(blank=True, null=True)),
                ("w0", models.PositiveIntegerField(default=0)),
                ("r0", models.PositiveIntegerField(default=0)),
                ("w1", models.PositiveIntegerField(default=0)),
                ("r1", models.PositiveIntegerField(default=0)),
                ("w2", models.PositiveIntegerField(default=0)),
                ("r2", models.PositiveIntegerField(default=0)),
                ("w3", models.PositiveIntegerField(default=0)),
                ("r3", models.PositiveIntegerField(default=0)),
                ("w4", models.PositiveIntegerField(default=0)),
                ("r4", models.PositiveIntegerField(default=0)),
                ("w5", models.PositiveIntegerField(default=0)),
                ("r5", models.PositiveIntegerField(default=0)),
                ("w6", models.PositiveIntegerField(default=0)),
                ("r6", models.PositiveIntegerField(default=0)),
                ("w7", models.PositiveIntegerField(default=0)),
                ("r7", models.PositiveIntegerField(default=0)),
                ("w8", models.PositiveIntegerField(default=0)),
                ("r8", models.PositiveIntegerField(default=0)),
                ("w9", models.PositiveIntegerField(default=0)),
                ("r9", models.PositiveIntegerField(default=0)),
                ("w10", models.PositiveIntegerField(default=0)),
                ("r10", models.PositiveIntegerField(default=0)),
                ("w11", models.PositiveIntegerField(default=0)),
                ("r11", models.PositiveIntegerField(default=0)),
            ],
            options={
                "db_table": "blamequeue_time_bucket",
                "default_permissions": (),
                "constraints": [
                    models.UniqueConstraint(
                        models.F("backend"),
                        models.F("step"),
                        models.F("start"),
                        models.F("queue"),
                        models.F("name"),
                        name="bq_bucket_key",
                    )
                ],
            },
        ),
    ]
