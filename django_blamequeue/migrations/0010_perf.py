# Fewer index entries per state change (issue 16). No update of a job row is HOT (``state`` is
# indexed), so every claim and every ack inserts an entry into each index whose predicate the
# new row version satisfies. Three of them become partial:
# - bq_job_queue_state: not inflight or done rows (inflight rows per queue: bq_job_inflight_key;
#   done rows: bq_job_finished), so neither a claim nor a done ack takes an entry;
# - bq_job_finished: rows with a finished_at (the claimed row has none);
# - bq_job_trace: not inflight rows (Job.objects.traced finds those through bq_job_lease).
# The indexes are rebuilt inside the migration's transaction: writes to the job table wait for
# it, which on a large table takes a while (docs/operations.md).

from django.db import migrations, models


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
    ]
