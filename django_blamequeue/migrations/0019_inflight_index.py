# One index for inflight rows instead of two. A claim (pending -> inflight) inserted an entry
# into the primary key, bq_job_lease (lease_expires_at) and bq_job_inflight_key (queue,
# concurrency_key); bq_job_inflight (queue, concurrency_key, lease_expires_at, inflight rows
# only) serves what both did, so a claim takes two entries instead of three:
# - a limited claim counts a queue's jobs in flight per key from its first two columns;
# - the rescuer's expired leases (state = 'inflight' AND lease_expires_at < now) scan it whole:
#   it holds only the running jobs (a few per worker slot), with the lease as an index column;
# - Job.objects.traced finds a trace's inflight rows in it, as it did in bq_job_lease.
# The new index is built inside the migration's transaction: writes to the job table wait for
# the scan of the table that finds its (few) rows (docs/operations.md).

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('django_blamequeue', '0018_job_autovacuum'),
    ]

    operations = [
        migrations.AddIndex(
            model_name='job',
            index=models.Index(models.F('queue'), models.F('concurrency_key'), models.F('lease_expires_at'), condition=models.Q(('state', 'inflight')), name='bq_job_inflight'),
        ),
        migrations.RemoveIndex(
            model_name='job',
            name='bq_job_lease',
        ),
        migrations.RemoveIndex(
            model_name='job',
            name='bq_job_inflight_key',
        ),
    ]
