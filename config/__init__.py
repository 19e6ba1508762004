"""The Django project: settings, ASGI and Celery apps; the top layer."""

from config.celery import app as celery_app

__all__ = ["celery_app"]
