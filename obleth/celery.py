"""The Celery app. Tasks are thin: lock, call a service, record the outcome."""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "obleth.settings")

app = Celery("obleth")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
