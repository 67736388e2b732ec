"""The Kafka producer ids and consumer groups move from the workers app to the domain (the Kafka
listener is an interface now, the broker package). Only Django's idea of the models moves: the
tables keep their names and rows (workers/migrations/0005 drops the old state)."""

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('accounts', '0001_initial'),
        ('replication', '0007_failover_and_verification'),
        ('workers', '0004_merge_kafka_group'),  # made the tables
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name='KafkaProducerId',
                    fields=[
                        ('id', models.BigAutoField(primary_key=True, serialize=False)),
                        ('client_id', models.CharField(blank=True, max_length=255)),
                        ('created', models.DateTimeField(auto_now_add=True)),
                        ('user', models.ForeignKey(null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to=settings.AUTH_USER_MODEL)),
                    ],
                    options={
                        'db_table': 'workers_kafkaproducerid',
                    },
                ),
                migrations.CreateModel(
                    name='KafkaGroup',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('group_id', models.CharField(max_length=255)),
                        ('state', models.JSONField(default=dict)),
                        ('expires', models.DateTimeField()),
                        ('tenant', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='+', to='accounts.tenant')),
                    ],
                    options={
                        'db_table': 'workers_kafkagroup',
                        'ordering': ['group_id'],
                        'constraints': [models.UniqueConstraint(fields=('tenant', 'group_id'), name='one_kafka_group_per_tenant')],
                    },
                ),
            ],
        ),
    ]
