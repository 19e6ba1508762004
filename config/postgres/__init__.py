"""Django's PostgreSQL backend, with a pool health check for busy processes
(base.py). settings.DATABASES names it as the ENGINE."""
