"""The Celery app: broker and results on Redis, tasks discovered in every Django app."""
import os
import socket

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tidal.settings")

app = Celery("tidal")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@app.task(name="tidal.ping")
def ping(payload: str) -> dict:
    """Health check: proves a worker took the task from the broker and answered through the backend."""
    return {"echo": payload, "worker": socket.gethostname(), "pid": os.getpid()}
