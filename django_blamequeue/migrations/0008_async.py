# Checkpoints of long jobs (ctx.checkpoint / ctx.last_checkpoint), on the local job
# table and on the SQS backend's ledger.

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('django_blamequeue', '0007_effects'),
    ]

    operations = [
        migrations.AddField(
            model_name='job',
            name='checkpoint',
            field=models.TextField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name='sqsjob',
            name='checkpoint',
            field=models.TextField(blank=True, null=True),
        ),
    ]
