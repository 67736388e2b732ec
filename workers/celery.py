"""The Celery app: `celery -A workers.celery worker|beat`.

Configuration comes from Django settings under the CELERY_ prefix (CELERY_BROKER_URL ...), so
the broker follows the mode: Redis in production, in-process in embedded mode.
"""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")

app = Celery("streamgate")
app.config_from_object("django.conf:settings", namespace="CELERY")
# Periodic tasks live in the database (django_celery_beat), so operators edit schedules in the
# admin and every beat restart keeps them; compose.yaml passes the same scheduler explicitly.
app.conf.beat_scheduler = "django_celery_beat.schedulers:DatabaseScheduler"
app.conf.beat_schedule = {
    # Retention (ttl): frequent small passes keep each delete batch short.
    "expire-messages": {"task": "workers.tasks.expire_messages_task", "schedule": 60.0},
}
# tasks.py of every installed Django app (workers is one).
app.autodiscover_tasks()
