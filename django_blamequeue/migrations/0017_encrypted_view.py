# The permission that opens encrypted jobs in the console (docs/encryption.md).

from django.db import migrations


class Migration(migrations.Migration):

    dependencies = [
        ('django_blamequeue', '0016_key_weights'),
    ]

    operations = [
        migrations.AlterModelOptions(
            name='job',
            options={'ordering': ['-priority', 'available_at', 'id'], 'permissions': [('retry_job', 'Can retry jobs from the dead-letter queue'), ('purge_queue', "Can purge a queue's waiting jobs"), ('cancel_job', 'Can cancel jobs'), ('move_job', 'Can move jobs to another queue'), ('reprioritize_job', "Can change jobs' priority"), ('view_encrypted_job', "Can see encrypted jobs' payloads, results and errors")]},
        ),
    ]
