from django.db import migrations, models
from django.utils import timezone


class Migration(migrations.Migration):

    dependencies = [
        ('replication', '0018_rebalance_move'),
    ]

    operations = [
        migrations.AddField(
            model_name='rebalance',
            name='updated',
            field=models.DateTimeField(auto_now=True, default=timezone.now),
            preserve_default=False,
        ),
    ]
