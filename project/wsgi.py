"""WSGI entry point (gunicorn project.wsgi)."""

import os

from django.core.wsgi import get_wsgi_application

from oxide_batch.conf import validate_settings

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")

application = get_wsgi_application()
# gunicorn runs no system check: an invalid app setting stops each worker's start,
# as the check (oxide_batch.E101…) stops `manage.py check` and scripts/serve's migrate.
validate_settings()
