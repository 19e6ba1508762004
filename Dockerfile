# The Agentdesk image: one image for web (Daphne), worker, beat, the one-shot
# migrate and the sandbox; docker-compose.yml picks the command.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /app

# Chromium for agents' browser sessions (capabilities/browser/), the same
# Debian package the tests drive.
RUN apt-get update \
    && apt-get install -y --no-install-recommends chromium fonts-dejavu-core \
    && rm -rf /var/lib/apt/lists/*
ENV AGENTDESK_BROWSER_EXECUTABLE=/usr/bin/chromium

# Dependencies first, from the lock file, so code changes reuse this layer.
COPY requirements.lock ./
RUN pip install -r requirements.lock

# The project itself: the whole build context, less what .dockerignore leaves
# out (.venv, .data, tests, bench, git, caches), so a new package needs no
# edit here (tests/deploy/test_image.py builds this file set and starts it).
COPY . .
# Editable, so settings' BASE_DIR is /app and templates/static are found there.
# /prometheus: the metrics volume web and workers share (docker-compose.yml);
# a named volume starts as a copy of it, owned by app.
RUN pip install --no-deps -e . \
    && useradd --create-home --uid 10001 app \
    && mkdir /data /prometheus && chown app:app /data /prometheus

# Beat's schedule and the sandbox's SQLite file live here (a volume).
VOLUME ["/data"]
USER app
EXPOSE 8000 8100
CMD ["python", "-m", "config.web", "--host", "0.0.0.0", "--port", "8000"]
