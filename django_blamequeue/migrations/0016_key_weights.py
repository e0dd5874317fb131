from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("django_blamequeue", "0015_expires_overlap"),
    ]

    operations = [
        migrations.AddField(
            model_name="queuecontrol",
            name="key_weights",
            field=models.JSONField(blank=True, null=True),
        ),
    ]
