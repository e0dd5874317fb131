from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("procapp", "0001_initial"),
    ]

    operations = [
        migrations.CreateModel(
            name="Write",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("job_id", models.CharField(db_index=True, max_length=26)),
                ("attempt", models.PositiveIntegerField()),
                ("token", models.CharField(max_length=32)),
                ("pid", models.IntegerField(default=0)),
                ("tag", models.CharField(default="", max_length=50)),
            ],
        ),
    ]
