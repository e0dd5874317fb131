# A job's error keeps the class path of its exception (``JobInfo.error_type``). A nullable
# column without a default: adding it rewrites no row on PostgreSQL or SQLite.

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('django_blamequeue', '0010_perf'),
    ]

    operations = [
        migrations.AddField(
            model_name='job',
            name='error_type',
            field=models.CharField(blank=True, max_length=255, null=True),
        ),
        migrations.AddField(
            model_name='sqsjob',
            name='error_type',
            field=models.CharField(blank=True, max_length=255, null=True),
        ),
    ]
