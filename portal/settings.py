"""Settings, all from the environment (django-environ), failing fast on bad values.

Two modes share every code path:
- embedded (no DATABASE_URL): SQLite files under STREAMGATE_DATA_DIR, in-memory channel layer,
  in-process Celery broker; what `make run` starts with no services installed.
- production (DATABASE_URL set): PostgreSQL, Redis for Celery, Channels and gateway presence.
"""

import secrets
from collections.abc import Callable
from pathlib import Path
from typing import Any

import environ
from django.core.exceptions import ImproperlyConfigured

from portal.filemodes import make_private, restrict_new_files
from portal.logging import configure_structlog, logging_config
from replication.engine.redisurl import celery_broker, channel_host, parse_sentinel

# Before any file is written: every process of the product imports these settings first
# (portal/filemodes.py), so what it writes is its owner's alone.
restrict_new_files()

BASE_DIR = Path(__file__).resolve().parent.parent

env = environ.Env()
DATA_DIR = Path(env.str("STREAMGATE_DATA_DIR", default=str(BASE_DIR / "var")))
EMBEDDED = not env.str("DATABASE_URL", default="")
make_private(DATA_DIR)  # files an older release wrote with wider modes


def _bool(name: str, default: bool) -> bool:
    # django-environ reads any unknown word as False; a typo in HTTPS must not quietly turn
    # the secure settings off.
    raw = env.str(name, default=str(default)).strip().lower()
    if raw in {"1", "true", "yes", "on"}:
        return True
    if raw in {"0", "false", "no", "off"}:
        return False
    raise ImproperlyConfigured(f"{name}={raw!r} is not a boolean: use true or false")


def _positive(read: Callable[..., float], name: str, default: float) -> Any:
    """A count, size, rate or duration from the environment, which must be above zero."""
    value = read(name, default=default)
    if value <= 0:
        raise ImproperlyConfigured(f"{name}={value!r} must be positive")
    return value


def _not_negative(name: str, default: int, zero: str) -> int:
    """A count, size or duration from the environment, 0 or more; `zero`: what 0 means."""
    value = env.int(name, default=default)
    if value < 0:
        raise ImproperlyConfigured(f"{name}={value!r} must be 0 or more (0: {zero})")
    return value


def _secret_key() -> str:
    if "SECRET_KEY" in env:
        return env.str("SECRET_KEY")
    if not EMBEDDED:
        raise ImproperlyConfigured("SECRET_KEY must be set when DATABASE_URL is set (production)")
    # Embedded mode keeps a generated key beside its SQLite files so sessions survive restarts.
    path = DATA_DIR / "secret_key"
    if not path.exists():
        DATA_DIR.mkdir(parents=True, exist_ok=True)
        path.write_text(secrets.token_urlsafe(50))
        path.chmod(0o600)
    return path.read_text().strip()


SECRET_KEY = _secret_key()
DEBUG = _bool("DEBUG", False)
ALLOWED_HOSTS = env.list("ALLOWED_HOSTS", default=["127.0.0.1", "localhost", "[::1]"])
CSRF_TRUSTED_ORIGINS = env.list("CSRF_TRUSTED_ORIGINS", default=[])

# Behind a TLS-terminating proxy in production; off for the embedded portal on plain http.
HTTPS = _bool("HTTPS", False)
SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https") if HTTPS else None
SECURE_SSL_REDIRECT = HTTPS
SESSION_COOKIE_SECURE = HTTPS
CSRF_COOKIE_SECURE = HTTPS
SECURE_HSTS_SECONDS = env.int("SECURE_HSTS_SECONDS", default=31536000 if HTTPS else 0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = HTTPS
SECURE_HSTS_PRELOAD = HTTPS
SECURE_REDIRECT_EXEMPT = [r"^healthz$", r"^readyz$"]
X_FRAME_OPTIONS = "DENY"
# Sent with every response (portal/security.py): the pages load scripts, styles, images and
# their websocket from the portal alone, and no inline script runs. "" sends none.
CONTENT_SECURITY_POLICY = env.str("STREAMGATE_CONTENT_SECURITY_POLICY", default=(
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "font-src 'self'; connect-src 'self'; object-src 'none'; base-uri 'none'; "
    "form-action 'self'; frame-ancestors 'none'"))
if CONTENT_SECURITY_POLICY and "default-src" not in CONTENT_SECURITY_POLICY:
    raise ImproperlyConfigured("STREAMGATE_CONTENT_SECURITY_POLICY must name a default-src "
                               "(e.g. \"default-src 'self'\"), or be empty to send none")

INSTALLED_APPS = [
    "daphne",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "whitenoise.runserver_nostatic",
    "django.contrib.staticfiles",
    "rest_framework",
    "knox",
    "django_filters",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "channels",
    "django_celery_beat",
    "accounts",
    "replication",
    "workers",
    "operations",
    "broker",
]

MIDDLEWARE = [
    # First, so every later log line of the request carries its id (portal/logging.py).
    "portal.logging.RequestIdMiddleware",
    "portal.bodylimit.BodyLimitMiddleware",  # before anything reads a body
    "django.middleware.security.SecurityMiddleware",
    # Before the session and CSRF middleware: it marks their cookies Secure over TLS.
    "portal.security.SecurityHeadersMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    # Each browser session's last-seen time for the account page (accounts/sessions.py).
    "accounts.sessions.SignInSeenMiddleware",
    # Who changes what, and through which interface (operations/audit.py).
    "operations.audit.AuditContextMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    # A signed-up tenant waiting for approval sees only that (portal/web/pending.py).
    "portal.web.pending.PendingTenantMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "portal.urls"
ASGI_APPLICATION = "portal.asgi.application"
WSGI_APPLICATION = "portal.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
            # portal.web is not an app of its own: its template filters are named here.
            "libraries": {"human": "portal.web.templatetags.human"},
        },
    },
]

if EMBEDDED:
    DATA_DIR.mkdir(parents=True, exist_ok=True)
    DATABASES = {"default": env.db_url_config(f"sqlite:///{DATA_DIR / 'control.sqlite3'}")}
    # Transactions take the write lock when they begin (SQLite refuses a reader's upgrade to
    # writer beside another writer at once, whatever the timeout: "database is locked"), and
    # WAL lets reads go on beside the one writer: requests and the embedded engine's threads
    # wait their turn, up to `timeout` seconds.
    DATABASES["default"]["OPTIONS"] = {
        "timeout": 20, "transaction_mode": "IMMEDIATE",
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL"}
else:
    DATABASES = {"default": env.db("DATABASE_URL")}
DATABASES["default"]["ATOMIC_REQUESTS"] = False
# Control-database connections are checked before reuse (a restarted database costs one
# reconnect) and pooled on PostgreSQL: kept per thread, they were opened anew for every ASGI
# request and Celery task (docs/benchmarks-history.md).
DATABASES["default"]["CONN_HEALTH_CHECKS"] = True
if DATABASES["default"]["ENGINE"].endswith("postgresql"):
    _pool_size = env.str("STREAMGATE_DB_POOL_SIZE", default="20")
    if not _pool_size.isdigit() or int(_pool_size) < 1:
        raise ImproperlyConfigured(f"STREAMGATE_DB_POOL_SIZE={_pool_size!r} must be a whole "
                                   "number, 1 or more: the connections each process may keep")
    DB_POOL_SIZE = int(_pool_size)
    DATABASES["default"].setdefault("OPTIONS", {})["pool"] = {
        "min_size": 1, "max_size": DB_POOL_SIZE, "max_idle": 60.0, "timeout": 30.0}
    DATABASES["default"]["CONN_MAX_AGE"] = 0  # the pool keeps them
else:
    DATABASES["default"]["CONN_MAX_AGE"] = 60
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"


def channel_layers(redis_url: str, prefix: str) -> dict[str, dict]:
    """The Redis channel layer; tests build theirs here too, so they run production's.

    Pub/sub: a group event is one PUBLISH, fanned out to the sockets inside each server
    process, where the core layer pushes it to one Redis list per socket and fell behind with
    200 dashboards open (docs/benchmarks-history.md). Only channels subscribed when an event is
    published hear it; nothing is queued for later, which the pages cover by re-fetching on
    (re)connect. It has no capacity or expiry: it ignores those options."""
    return {"default": {"BACKEND": "channels_redis.pubsub.RedisPubSubChannelLayer",
                        "CONFIG": {"hosts": [channel_host(redis_url)], "prefix": prefix}}}


# redis://host:port/db, or Redis Sentinel's group: sentinel://host:port,host:port/master/db
# (replication/engine/redisurl.py), which every Redis client here follows through a failover.
REDIS_URL = env.str("REDIS_URL", default="")
try:
    parse_sentinel(REDIS_URL)
except ValueError as _bad:
    raise ImproperlyConfigured(f"REDIS_URL: {_bad}") from None
# Prefix of the engine's Redis keys, Celery queues and channel-layer groups, so deployments
# (and test runs) can share one Redis without hearing each other.
STREAMGATE_NAMESPACE = env.str("STREAMGATE_NAMESPACE", default="")
if REDIS_URL:
    CHANNEL_LAYERS = channel_layers(REDIS_URL, f"{STREAMGATE_NAMESPACE}asgi")
else:
    CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}

CELERY_BROKER_URL, CELERY_BROKER_TRANSPORT_OPTIONS = celery_broker(REDIS_URL or "memory://")
# Embedded mode has no broker process: tasks run where they are enqueued, and
# `manage.py runembedded` runs the beat schedule in a thread (workers/embedded.py).
CELERY_TASK_ALWAYS_EAGER = not REDIS_URL
CELERY_RESULT_BACKEND = None
# Separate queues let several deployments (or test runs) share one Redis.
CELERY_TASK_DEFAULT_QUEUE = env.str("CELERY_QUEUE", default="celery")
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1

SPARK_MASTER_URL = env.str("SPARK_MASTER_URL", default="")

# Shared by every web worker: sign-in failure counts and API throttles must add up across them.
# Timeouts, so a Redis that stops answering fails a request in seconds (a 503, or the produce
# throttle letting it through: portal/unavailable.py) rather than holding it forever.
if REDIS_URL:
    CACHES = {"default": {"BACKEND": "portal.cache.ReusingRedisCache",
                          "LOCATION": [REDIS_URL], "KEY_PREFIX": f"{STREAMGATE_NAMESPACE}cache",
                          "OPTIONS": {"socket_connect_timeout": 2, "socket_timeout": 5}}}
else:
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}

AUTHENTICATION_BACKENDS = ["accounts.throttle.ThrottledModelBackend"]
LOGIN_FAILURE_LIMIT = env.int("STREAMGATE_LOGIN_FAILURE_LIMIT", default=10)
LOGIN_FAILURE_WINDOW = env.int("STREAMGATE_LOGIN_FAILURE_WINDOW", default=300)

# Who may create a tenant from the sign-up page: anyone (open), anyone but an operator approves
# the tenant before streams are created in it (approval), or nobody (off: operators create
# tenants, teams grow by invitation). Open on the embedded default, a developer's own portal;
# off in production unless the operator chooses.
SIGNUP = env.str("STREAMGATE_SIGNUP", default="open" if EMBEDDED else "off").strip().lower()
if SIGNUP not in {"open", "approval", "off"}:
    raise ImproperlyConfigured(f"STREAMGATE_SIGNUP={SIGNUP!r} is not a sign-up mode: use open, "
                               "approval or off")
# Sign-ups, invitation sign-ups and password-reset requests from one client address: at most
# SIGNUP_LIMIT within SIGNUP_WINDOW seconds (accounts/throttle.py).
SIGNUP_LIMIT = _positive(env.int, "STREAMGATE_SIGNUP_LIMIT", 20)
SIGNUP_WINDOW = _positive(env.int, "STREAMGATE_SIGNUP_WINDOW", 3600)
# Password-reset mail (and any other): django-environ's EMAIL_URL (smtp+tls://user:pass@host:587,
# consolemail://, filemail:///path, dummymail://). The console default writes each mail, its
# reset link too, to the web process's output; the tests swap in the in-memory outbox.
try:
    vars().update(env.email_url("EMAIL_URL", default="consolemail://"))
except ImproperlyConfigured as error:
    raise ImproperlyConfigured(f"EMAIL_URL: {error}: use smtp://, smtps://, smtp+tls://, "
                               "consolemail://, filemail:// or dummymail://") from error
DEFAULT_FROM_EMAIL = env.str("DEFAULT_FROM_EMAIL", default="streamgate@localhost")

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "overview"
LOGOUT_REDIRECT_URL = "login"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = DATA_DIR / "static"
# WhiteNoise scans it at start-up; before the first collectstatic it must at least exist.
STATIC_ROOT.mkdir(parents=True, exist_ok=True)
STATICFILES_DIRS = [BASE_DIR / "static"]
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedManifestStaticFilesStorage"},
}

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "accounts.tokens.TokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_PAGINATION_CLASS": "rest_framework.pagination.LimitOffsetPagination",
    "PAGE_SIZE": 100,
    "DEFAULT_FILTER_BACKENDS": ["django_filters.rest_framework.DjangoFilterBackend"],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "EXCEPTION_HANDLER": "portal.api.errors.exception_handler",
    # Per user; the produce endpoint takes up to 10,000 records a request.
    "DEFAULT_THROTTLE_RATES": {"produce": env.str("STREAMGATE_PRODUCE_RATE", default="200/second")},
    # Every request counts against its user's tenants' request quotas (replication/quotas.py).
    "DEFAULT_THROTTLE_CLASSES": ["portal.quotas.TenantRequestThrottle"],
}
REST_KNOX = {"TOKEN_TTL": None, "AUTO_REFRESH": False}
# knox's token model is swappable; accounts.TokenInfo points at it (its migration reads this).
KNOX_TOKEN_MODEL = "knox.AuthToken"

SPECTACULAR_SETTINGS = {
    "TITLE": "streamgate API",
    "DESCRIPTION": "Streams, topics, replicas, upstreams, clusters and gateways.",
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    # /rest speaks maprcli's envelope, not OpenAPI; the schema documents /api/v1 only.
    "PREPROCESSING_HOOKS": ["portal.api.only_api_v1"],
    "ENUM_NAME_OVERRIDES": {
        "CompressionEnum": "replication.models.Compression",
        "TimestampTypeEnum": "replication.models.TimestampType",
        "TokenScopeEnum": "accounts.models.TokenScope",
    },
}

# The engine's limits (DESIGN.md invariant 7); settings so tests and operators see them named.
MAX_REPLICAS_PER_STREAM = 64
MAX_UPSTREAMS_PER_REPLICA = 64
MAX_MESSAGE_BYTES = env.int("STREAMGATE_MAX_MESSAGE_BYTES", default=1024 * 1024)
# The largest request body the portal takes (portal/bodylimit.py): Django's 2.5 MiB, or more
# when a message of the largest size, in base64 with its JSON, needs more.
_BODY_FLOOR = MAX_MESSAGE_BYTES * 4 // 3 + 64 * 1024
DATA_UPLOAD_MAX_MEMORY_SIZE = _positive(env.int, "STREAMGATE_MAX_BODY_BYTES",
                                        max(2621440, _BODY_FLOOR))
if DATA_UPLOAD_MAX_MEMORY_SIZE < _BODY_FLOOR:
    raise ImproperlyConfigured(f"STREAMGATE_MAX_BODY_BYTES must be at least {_BODY_FLOOR}, so a "
                               "REST produce can carry a message of STREAMGATE_MAX_MESSAGE_BYTES")

# The replication engine (workers/replication/). Batches are cut per
# (replica, topic, partition), bounded by messages, bytes and linger (how long a wake-up waits
# for more messages to join the batch).
REPLICATION_BATCH_MESSAGES = _positive(env.int, "STREAMGATE_BATCH_MESSAGES", 5000)
REPLICATION_BATCH_BYTES = _positive(env.int, "STREAMGATE_BATCH_BYTES", 4 << 20)
# 2 ms, not 20: partial batches already wait while their partition has one in flight, so a
# longer linger only added lag (docs/benchmarks.md, issue 15: p50 49 -> 39 ms, same CPU).
REPLICATION_LINGER_MS = env.int("STREAMGATE_LINGER_MS", default=2)
# Batches of one (replica, topic, partition) in flight at once, consecutive, to one gateway.
REPLICATION_WINDOW = _positive(env.int, "STREAMGATE_WINDOW", 4)
# A gateway that has not acknowledged a batch this long is skipped for a while (suspect).
REPLICATION_ACK_TIMEOUT = _positive(env.float, "STREAMGATE_ACK_TIMEOUT", 10.0)
REPLICATION_SUSPECT_SECONDS = env.float("STREAMGATE_SUSPECT_SECONDS", default=30.0)
# Links waiting for a live gateway are retried this often; every link is re-planned each sweep
# in case a wake-up was lost (wake-ups are the fast path, the sweep the safety net).
REPLICATION_RETRY_SECONDS = _positive(env.float, "STREAMGATE_RETRY_SECONDS", 2.0)
REPLICATION_SWEEP_SECONDS = _positive(env.float, "STREAMGATE_SWEEP_SECONDS", 20.0)
# `-throttle true` on a replica link: at most these rates per link, with a one-second burst.
REPLICATION_THROTTLE_MESSAGES_PER_S = _positive(env.int, "STREAMGATE_THROTTLE_MESSAGES_PER_S",
                                                10_000)
REPLICATION_THROTTLE_BYTES_PER_S = _positive(env.int, "STREAMGATE_THROTTLE_BYTES_PER_S", 8 << 20)
# `replica list` flags a link stalled when messages are pending and none applied this long.
REPLICATION_STALL_SECONDS = env.float("STREAMGATE_STALL_SECONDS", default=60.0)
# A link this far behind on a partition catches up by a Spark job, not gateway batches; a job
# whose record stops moving this long lost its worker and is run again.
REPLICATION_CATCHUP_THRESHOLD = _not_negative("STREAMGATE_CATCHUP_THRESHOLD", 500_000,
                                              "no hand-off to Spark")
JOB_STALE_SECONDS = _positive(env.float, "STREAMGATE_JOB_STALE_SECONDS", 300.0)
# A job still queued after this many seconds is enqueued again: a broker restarted empty (a
# Redis failover, a restart without persistence) loses its task, and its link would wait on it.
# A job enqueued twice runs once (job_run skips a job that ended) or twice harmlessly.
JOB_QUEUED_SECONDS = _positive(env.float, "STREAMGATE_JOB_QUEUED_SECONDS", 60.0)
# `stream replica failover` drains the link for at most DRAIN seconds (then changes nothing);
# a source store silent for PROBE seconds is unreachable (only -force true fails over then).
FAILOVER_DRAIN_SECONDS = _positive(env.float, "STREAMGATE_FAILOVER_DRAIN_SECONDS", 120.0)
FAILOVER_PROBE_SECONDS = _positive(env.float, "STREAMGATE_FAILOVER_PROBE_SECONDS", 5.0)
# A message store that does not answer fails a call after this many seconds (pool wait and
# connect_timeout): a retriable error, not queues of half-minute waits (issue 26).
STORE_WAIT_SECONDS = _positive(env.float, "STREAMGATE_STORE_WAIT_SECONDS", 5.0)
# The layout of a new PostgreSQL message store (issue 30): "rows" (a message a row) or
# "batches" (Kafka's record batches kept as sent). A store keeps the layout it was made with.
STORE_LAYOUT = env.str("STREAMGATE_STORE_LAYOUT", default="batches")
if STORE_LAYOUT not in ("rows", "batches"):
    raise ImproperlyConfigured(f"STREAMGATE_STORE_LAYOUT={STORE_LAYOUT!r}: use rows or batches")
# Recent batches a process serving Kafka fetches keeps (engine/pgbatch/tailcache.py; 0: none).
FETCH_CACHE_BYTES = _not_negative("STREAMGATE_FETCH_CACHE_BYTES", 256 << 20, "none kept")
# Messages below which a comparison or a failback's copy stays off Spark (workers/compare.py).
BULK_IN_PROCESS = _positive(env.int, "STREAMGATE_BULK_IN_PROCESS", 250_000)
# A partition move's copy and a compaction of this many bytes or more run on Spark, offsets
# SPLIT per task at least (workers/moves.py, workers/compaction.py); smaller ones in process.
MOVE_SPARK_BYTES = _positive(env.int, "STREAMGATE_MOVE_SPARK_BYTES", 1 << 30)
MOVE_SPARK_SPLIT = _positive(env.int, "STREAMGATE_MOVE_SPARK_SPLIT", 200_000)
COMPACT_SPARK_BYTES = _positive(env.int, "STREAMGATE_COMPACT_SPARK_BYTES", 1 << 30)
COMPACT_SPARK_SPLIT = _positive(env.int, "STREAMGATE_COMPACT_SPARK_SPLIT", 200_000)
# A compaction pass's pace (Kafka's log.cleaner.io.max.bytes.per.second; 0: unlimited) and
# the niceness added to its threads: docs/settings.md, replication/engine/pacing.py.
COMPACT_MAX_BYTES_PER_SEC = _not_negative("STREAMGATE_COMPACT_MAX_BYTES_PER_SEC", 32 << 20,
                                          "unlimited")
COMPACT_NICE = env.int("STREAMGATE_COMPACT_NICE", default=10)
if not 0 <= COMPACT_NICE <= 19:
    raise ImproperlyConfigured(f"STREAMGATE_COMPACT_NICE={COMPACT_NICE} must be 0 to 19")
# Continuous verification: messages compared per link per run, at most (the rest next run).
VERIFY_MAX_MESSAGES = env.int("STREAMGATE_VERIFY_MAX_MESSAGES", default=1_000_000)
# `stream replica failback -dryrun true` estimates its time from these rates (messages/s): the
# copy of what the promoted stream gained (a PostgreSQL pipe) and the divergent tail kept aside.
FAILBACK_COPY_RATE = _positive(env.float, "STREAMGATE_FAILBACK_COPY_RATE", 200_000.0)
FAILBACK_KEEP_RATE = _positive(env.float, "STREAMGATE_FAILBACK_KEEP_RATE", 50_000.0)
# Gateway presence: a Redis key refreshed every HEARTBEAT seconds that lives PRESENCE_TTL.
GATEWAY_HEARTBEAT_SECONDS = _positive(env.float, "STREAMGATE_GATEWAY_HEARTBEAT", 2.0)
GATEWAY_PRESENCE_TTL = env.float("STREAMGATE_GATEWAY_TTL", default=6.0)
GATEWAY_CONCURRENCY = _positive(env.int, "STREAMGATE_GATEWAY_CONCURRENCY", 4)
# Replicators split the moving links with a lease per link (replication/transport/leases.py):
# held this long unless renewed (every quarter of it), so one killed -9 has its links taken over
# by the others within about 1.25 times this.
REPLICATOR_LEASE_SECONDS = _positive(env.float, "STREAMGATE_REPLICATOR_LEASE_SECONDS", 3.0)
if GATEWAY_PRESENCE_TTL <= GATEWAY_HEARTBEAT_SECONDS:
    raise ImproperlyConfigured("STREAMGATE_GATEWAY_TTL must exceed STREAMGATE_GATEWAY_HEARTBEAT")
# The Kafka listener (broker): Kafka's socket.request.max.bytes and
# connections.max.idle.ms; listener presence (a node is live while it beats within the TTL);
# SASL_SSL when a certificate and its key are given (PEM files).
KAFKA_MAX_REQUEST_BYTES = _positive(env.int, "STREAMGATE_KAFKA_MAX_REQUEST_BYTES",
                                    100 * 1024 * 1024)
KAFKA_IDLE_SECONDS = _positive(env.float, "STREAMGATE_KAFKA_IDLE_SECONDS", 600.0)
KAFKA_HEARTBEAT_SECONDS = _positive(env.float, "STREAMGATE_KAFKA_HEARTBEAT", 1.0)
KAFKA_PRESENCE_TTL = env.float("STREAMGATE_KAFKA_TTL", default=4.0)
KAFKA_TLS_CERT = env.str("STREAMGATE_KAFKA_TLS_CERT", default="")
KAFKA_TLS_KEY = env.str("STREAMGATE_KAFKA_TLS_KEY", default="")
if KAFKA_PRESENCE_TTL <= KAFKA_HEARTBEAT_SECONDS:
    raise ImproperlyConfigured("STREAMGATE_KAFKA_TTL must exceed STREAMGATE_KAFKA_HEARTBEAT")
# What the listener takes from a client (docs/security.md). After sign-in: a record batch's
# records decoded (decompressed; a Produce request's batches together at most
# KAFKA_MAX_REQUEST_BYTES). Before it (Kafka's sasl.server.max.receive.size): smaller frames,
# and AUTH_SECONDS from connecting to signing in. Any time: FRAME_SECONDS to send one frame
# once begun, CONNECTIONS_PER_IP open connections per client address (max.connections.per.ip),
# SASL_FAILURE_LIMIT failed sign-ins per address within SASL_FAILURE_WINDOW seconds.
KAFKA_MAX_BATCH_BYTES = _positive(env.int, "STREAMGATE_KAFKA_MAX_BATCH_BYTES",
                                  8 * MAX_MESSAGE_BYTES)
KAFKA_MAX_PREAUTH_BYTES = _positive(env.int, "STREAMGATE_KAFKA_MAX_PREAUTH_BYTES", 512 * 1024)
KAFKA_AUTH_SECONDS = _positive(env.float, "STREAMGATE_KAFKA_AUTH_SECONDS", 30.0)
KAFKA_FRAME_SECONDS = _positive(env.float, "STREAMGATE_KAFKA_FRAME_SECONDS", 60.0)
KAFKA_CONNECTIONS_PER_IP = _positive(env.int, "STREAMGATE_KAFKA_CONNECTIONS_PER_IP", 1000)
KAFKA_SASL_FAILURE_LIMIT = _positive(env.int, "STREAMGATE_KAFKA_SASL_FAILURE_LIMIT", 10)
KAFKA_SASL_FAILURE_WINDOW = _positive(env.int, "STREAMGATE_KAFKA_SASL_FAILURE_WINDOW", 60)
if KAFKA_MAX_BATCH_BYTES <= MAX_MESSAGE_BYTES:
    raise ImproperlyConfigured("STREAMGATE_KAFKA_MAX_BATCH_BYTES must exceed "
                               "STREAMGATE_MAX_MESSAGE_BYTES: a batch must hold a message of the "
                               "largest size allowed")
if bool(KAFKA_TLS_CERT) != bool(KAFKA_TLS_KEY):
    raise ImproperlyConfigured("give both STREAMGATE_KAFKA_TLS_CERT and STREAMGATE_KAFKA_TLS_KEY "
                               "(PEM files) for SASL_SSL, or neither for SASL_PLAINTEXT")
# A SASL session lasts KAFKA_SESSION_LIFETIME (Kafka's connections.max.reauth.ms, capped by the
# token's expiry): clients re-authenticate on the open connection (KIP-368) or are closed on
# their next request. Each listener re-checks its connections' tokens, users and memberships
# every KAFKA_REVOCATION_CHECK seconds and closes those revoked.
KAFKA_SESSION_LIFETIME_SECONDS = _positive(env.float, "STREAMGATE_KAFKA_SESSION_LIFETIME", 3600.0)
KAFKA_REVOCATION_CHECK_SECONDS = _positive(env.float, "STREAMGATE_KAFKA_REVOCATION_CHECK", 2.0)
# The listener process's interpreter switch interval (sys.setswitchinterval; Python's default
# is 5 ms): how long a thread decoding a large produce holds the GIL from a small request.
KAFKA_SWITCH_INTERVAL_MS = _positive(env.float, "STREAMGATE_KAFKA_SWITCH_INTERVAL_MS", 1.0)
# Kafka's group.initial.rebalance.delay.ms (3 s): an empty group waits this long for more
# members before its first rebalance, so consumers started together share one generation.
KAFKA_GROUP_INITIAL_DELAY_MS = _not_negative("STREAMGATE_KAFKA_GROUP_INITIAL_DELAY_MS", 3_000,
                                             "a new group's first rebalance does not wait")
# KIP-848 consumer groups (group.protocol=consumer): Kafka's group.consumer.session.timeout.ms
# and group.consumer.heartbeat.interval.ms.
KAFKA_CONSUMER_SESSION_MS = _positive(env.int, "STREAMGATE_KAFKA_CONSUMER_SESSION_MS", 45_000)
KAFKA_CONSUMER_HEARTBEAT_MS = _positive(env.int, "STREAMGATE_KAFKA_CONSUMER_HEARTBEAT_MS", 5_000)
# The SASL mechanisms the listener offers (SaslHandshake answers with them): PLAIN takes an API
# token as the password, SCRAM-SHA-256/512 a SCRAM password the user set for the mechanism.
KAFKA_SASL_MECHANISMS = tuple(env.list("STREAMGATE_KAFKA_SASL_MECHANISMS",
                                       default=["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]))
if not KAFKA_SASL_MECHANISMS or not set(KAFKA_SASL_MECHANISMS) <= {
        "PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"}:
    raise ImproperlyConfigured("STREAMGATE_KAFKA_SASL_MECHANISMS must list one or more of PLAIN, "
                               f"SCRAM-SHA-256, SCRAM-SHA-512, not {KAFKA_SASL_MECHANISMS}")
# `-synchronous true`: a produce waits at most SYNC_TIMEOUT_MS for the synchronous replicas,
# re-reading their ends every SYNC_RECHECK_MS between "applied" notifications; a replica that
# misses the timeout, or applies slower than SYNC_LATENCY_MS, drops to asynchronous by itself.
REPLICATION_SYNC_TIMEOUT_MS = _positive(env.int, "STREAMGATE_SYNC_TIMEOUT_MS", 2000)
REPLICATION_SYNC_LATENCY_MS = _positive(env.int, "STREAMGATE_SYNC_LATENCY_MS", 1000)
REPLICATION_SYNC_RECHECK_MS = _positive(env.int, "STREAMGATE_SYNC_RECHECK_MS", 50)
if REPLICATION_SYNC_LATENCY_MS > REPLICATION_SYNC_TIMEOUT_MS:
    raise ImproperlyConfigured("STREAMGATE_SYNC_LATENCY_MS must not exceed "
                               "STREAMGATE_SYNC_TIMEOUT_MS")

# Alarms (operations/alarms.py): evaluated this often by beat; a retention loss stays raised this
# long after the last one seen.
ALARM_EVALUATE_SECONDS = _positive(env.float, "STREAMGATE_ALARM_EVALUATE_SECONDS", 10.0)
ALARM_RETENTION_HOLD_SECONDS = _positive(env.float, "STREAMGATE_ALARM_RETENTION_HOLD", 86400.0)

# JSON lines with request and task ids (portal/logging.py) in production; readable lines on a
# developer's console (DEBUG, or the embedded mode of `make run`).
LOG_JSON = _bool("STREAMGATE_LOG_JSON", not (DEBUG or EMBEDDED))
LOGGING = logging_config(json=LOG_JSON, level=env.str("LOG_LEVEL", default="INFO"))
configure_structlog()
