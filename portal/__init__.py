# Load the Celery app with Django so tasks enqueued from web processes use its broker.
from workers.celery import app as celery_app

__all__ = ("celery_app",)
