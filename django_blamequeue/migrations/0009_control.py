# The control plane: queue control rows, rate windows, the worker registry, and
# the concurrency key and snooze count of jobs.

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('django_blamequeue', '0008_async'),
    ]

    operations = [
        migrations.CreateModel(
            name='QueueControl',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('backend', models.CharField(max_length=100)),
                ('queue', models.CharField(max_length=200)),
                ('paused', models.BooleanField(default=False)),
                ('reason', models.TextField(blank=True, default='')),
                ('paused_at', models.DateTimeField(blank=True, null=True)),
                ('paused_by', models.CharField(blank=True, max_length=150, null=True)),
                ('has_limits', models.BooleanField(default=False)),
                ('limited', models.BooleanField(default=False)),
                ('concurrency', models.PositiveIntegerField(blank=True, null=True)),
                ('key_concurrency', models.PositiveIntegerField(blank=True, null=True)),
                ('rate_max', models.PositiveIntegerField(blank=True, null=True)),
                ('rate_per', models.FloatField(blank=True, null=True)),
                ('key_rate_max', models.PositiveIntegerField(blank=True, null=True)),
                ('key_rate_per', models.FloatField(blank=True, null=True)),
                ('key_cursor', models.CharField(blank=True, max_length=255, null=True)),
                ('version', models.PositiveIntegerField(default=0)),
                ('updated_at', models.DateTimeField(blank=True, null=True)),
            ],
            options={
                'db_table': 'blamequeue_queue_control',
                'permissions': [('pause_queue', 'Can pause and resume queues'), ('change_queue_limits', 'Can change queue limits')],
                'default_permissions': (),
            },
        ),
        migrations.CreateModel(
            name='RateStart',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('backend', models.CharField(max_length=100)),
                ('queue', models.CharField(max_length=200)),
                ('key', models.CharField(default='', max_length=255)),
                ('started_at', models.DateTimeField()),
            ],
            options={
                'db_table': 'blamequeue_rate_start',
                'default_permissions': (),
            },
        ),
        migrations.CreateModel(
            name='WorkerRecord',
            fields=[
                ('worker_id', models.CharField(max_length=100, primary_key=True, serialize=False)),
                ('backend', models.CharField(max_length=100)),
                ('host', models.CharField(max_length=255)),
                ('pid', models.IntegerField()),
                ('queues', models.JSONField(default=list)),
                ('concurrency', models.PositiveIntegerField(default=1)),
                ('running', models.JSONField(default=list)),
                ('job_names', models.JSONField(default=list)),
                ('state', models.CharField(default='running', max_length=20)),
                ('version', models.CharField(blank=True, default='', max_length=50)),
                ('done', models.PositiveIntegerField(default=0)),
                ('failed', models.PositiveIntegerField(default=0)),
                ('started_at', models.DateTimeField()),
                ('last_seen', models.DateTimeField()),
                ('stopped_at', models.DateTimeField(blank=True, null=True)),
            ],
            options={
                'db_table': 'blamequeue_worker',
                'default_permissions': (),
            },
        ),
        migrations.AddField(
            model_name='job',
            name='concurrency_key',
            field=models.CharField(blank=True, max_length=255, null=True),
        ),
        migrations.AddField(
            model_name='job',
            name='snoozes',
            field=models.PositiveIntegerField(default=0),
        ),
        migrations.AddField(
            model_name='sqsjob',
            name='concurrency_key',
            field=models.CharField(blank=True, max_length=255, null=True),
        ),
        migrations.AddField(
            model_name='sqsjob',
            name='snoozes',
            field=models.PositiveIntegerField(default=0),
        ),
        migrations.AddIndex(
            model_name='job',
            index=models.Index(models.F('queue'), models.F('concurrency_key'), condition=models.Q(('state', 'inflight')), name='bq_job_inflight_key'),
        ),
        migrations.AddIndex(
            model_name='job',
            index=models.Index(models.F('queue'), models.F('concurrency_key'), models.OrderBy(models.F('priority'), descending=True), models.F('available_at'), models.F('id'), condition=models.Q(('state', 'pending'), ('concurrency_key__isnull', False)), name='bq_job_key_claim'),
        ),
        migrations.AddIndex(
            model_name='sqsjob',
            index=models.Index(models.F('queue'), models.F('concurrency_key'), condition=models.Q(('state', 'inflight')), name='bq_sqs_inflight_key'),
        ),
        migrations.AddConstraint(
            model_name='queuecontrol',
            constraint=models.UniqueConstraint(models.F('backend'), models.F('queue'), name='bq_control_queue'),
        ),
        migrations.AddIndex(
            model_name='ratestart',
            index=models.Index(models.F('backend'), models.F('queue'), models.F('key'), models.F('started_at'), name='bq_rate_window'),
        ),
        migrations.AddIndex(
            model_name='workerrecord',
            index=models.Index(models.F('backend'), models.F('last_seen'), name='bq_worker_seen'),
        ),
    ]
