# Fewer index entries per state change. No update of a job row is HOT (``state`` is
# indexed), so every claim and every ack inserts an entry into each index whose predicate the
# new row version satisfies. Three of them become partial:
# - bq_job_queue_state: not inflight or done rows (inflight rows per queue: bq_job_inflight_key;
#   done rows: bq_job_finished), so neither a claim nor a done ack takes an entry;
# - bq_job_finished: rows with a finished_at (the claimed row has none);
# - bq_job_trace: not inflight rows (Job.objects.traced finds those through bq_job_lease).
# On PostgreSQL it also drops the varchar_pattern_ops copy of the primary key that Django makes
# for a CharField key (``…_id_…_like``), for ``LIKE 'prefix%'`` look-ups no query here makes:
# one more entry per state change. (Django drops it with DROP INDEX IF EXISTS if the field is
# ever altered, so its absence is safe for later migrations.)
# The indexes are rebuilt inside the migration's transaction: writes to the job table wait for
# it, which on a large table takes a while (docs/operations.md).

from django.db import migrations, models


def _like_index(schema_editor):
    job = 'blamequeue_job'
    return job, schema_editor._create_index_name(job, ['id'], suffix='_like')


def drop_id_like(apps, schema_editor):
    if schema_editor.connection.vendor == 'postgresql':
        _, name = _like_index(schema_editor)
        schema_editor.execute(f'DROP INDEX IF EXISTS {schema_editor.quote_name(name)}')


def restore_id_like(apps, schema_editor):
    if schema_editor.connection.vendor == 'postgresql':
        table, name = _like_index(schema_editor)
        schema_editor.execute(
            f'CREATE INDEX IF NOT EXISTS {schema_editor.quote_name(name)} '
            f'ON {schema_editor.quote_name(table)} (id varchar_pattern_ops)'
        )


class Migration(migrations.Migration):

    dependencies = [
        ('django_blamequeue', '0009_control'),
    ]

    operations = [
        migrations.RemoveIndex(
            model_name='job',
            name='bq_job_queue_state',
        ),
        migrations.RemoveIndex(
            model_name='job',
            name='bq_job_finished',
        ),
        migrations.RemoveIndex(
            model_name='job',
            name='bq_job_trace',
        ),
        migrations.AddIndex(
            model_name='job',
            index=models.Index(models.F('queue'), models.F('state'), models.F('id'), condition=models.Q(('state__in', ['inflight', 'done']), _negated=True), name='bq_job_queue_state'),
        ),
        migrations.AddIndex(
            model_name='job',
            index=models.Index(models.F('state'), models.F('finished_at'), condition=models.Q(('finished_at__isnull', False)), name='bq_job_finished'),
        ),
        migrations.AddIndex(
            model_name='job',
            index=models.Index(models.F('trace_id'), condition=models.Q(('trace_id__isnull', False), models.Q(('state', 'inflight'), _negated=True)), name='bq_job_trace'),
        ),
        migrations.RunPython(drop_id_like, restore_id_like, elidable=True),
    ]
