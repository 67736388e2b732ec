"""The Job record moves from the workers app to the domain, which starts and finishes jobs
(replication/services/jobs.py). Only Django's idea of the model moves: the table keeps its name,
workers_job, and its rows (workers/migrations/0002 drops the old state)."""

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('accounts', '0001_initial'),
        ('replication', '0004_gateway_bytes_applied'),
        ('workers', '0001_job'),  # made the table
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name='Job',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('kind', models.CharField(choices=[('copystream', 'Copystream'), ('diffstreams', 'Diffstreams'), ('catchup', 'Catchup')], max_length=16)),
                        ('state', models.CharField(choices=[('QUEUED', 'Queued'), ('RUNNING', 'Running'), ('SUCCEEDED', 'Succeeded'), ('FAILED', 'Failed')], default='QUEUED', max_length=16)),
                        ('source_path', models.CharField(max_length=1024)),
                        ('destination_path', models.CharField(max_length=1024)),
                        ('options', models.JSONField(blank=True, default=dict)),
                        ('messages_total', models.BigIntegerField(default=0)),
                        ('messages_done', models.BigIntegerField(default=0)),
                        ('bytes_total', models.BigIntegerField(default=0)),
                        ('bytes_done', models.BigIntegerField(default=0)),
                        ('result', models.JSONField(blank=True, default=dict)),
                        ('error', models.TextField(blank=True)),
                        ('created', models.DateTimeField(auto_now_add=True)),
                        ('started', models.DateTimeField(blank=True, null=True)),
                        ('finished', models.DateTimeField(blank=True, null=True)),
                        ('updated', models.DateTimeField(auto_now=True)),
                        ('destination', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to='replication.stream')),
                        ('link', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='jobs', to='replication.replicalink')),
                        ('requested_by', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to=settings.AUTH_USER_MODEL)),
                        ('source', models.ForeignKey(null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to='replication.stream')),
                        ('tenant', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='jobs', to='accounts.tenant')),
                    ],
                    options={
                        'db_table': 'workers_job',
                        'ordering': ['-created', '-pk'],
                        'indexes': [models.Index(fields=['tenant', '-created'], name='workers_job_tenant__ee2957_idx')],
                    },
                ),
            ],
        ),
    ]
