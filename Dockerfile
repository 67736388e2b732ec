# One image for every streamgate process in compose.yaml: web (daphne), celery worker and beat,
# and the Spark master/worker (hence the JRE).
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    # The source tree in /app comes first on the path, so BASE_DIR (templates/, static/,
    # manage.py) is /app whichever of daphne, celery or manage.py imports the project.
    PYTHONPATH=/app \
    STREAMGATE_DATA_DIR=/var/lib/streamgate

RUN apt-get update \
    && apt-get install -y --no-install-recommends default-jre-headless \
    && rm -rf /var/lib/apt/lists/*

WORKDIR /app

# Dependencies first, from pyproject.toml alone, so a code change does not reinstall them.
COPY pyproject.toml ./
RUN python -c "import tomllib; print('\n'.join(tomllib.load(open('pyproject.toml', 'rb'))['project']['dependencies']))" > /tmp/requirements.txt \
    && pip install -r /tmp/requirements.txt

COPY . .
RUN pip install --no-deps . \
    && python -m workers.spark.cds

# A throwaway key: settings need one to load, and none may be baked into the image.
RUN SECRET_KEY=collectstatic-only python manage.py collectstatic --no-input --verbosity 0 \
    && useradd --system --home-dir /app --shell /usr/sbin/nologin streamgate \
    && chown -R streamgate /var/lib/streamgate

USER streamgate
EXPOSE 8000
CMD ["daphne", "-b", "0.0.0.0", "-p", "8000", "portal.asgi:application"]
