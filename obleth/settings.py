"""obleth settings. Everything comes from OBLETH_* environment variables (see README)."""

from __future__ import annotations

from pathlib import Path

import dj_database_url
from csp.constants import NONE as CSP_NONE
from csp.constants import SELF as CSP_SELF
from csp.constants import UNSAFE_INLINE as CSP_UNSAFE_INLINE
from django.core.exceptions import ImproperlyConfigured

from obleth.env import env_bool, env_int, env_list, env_str

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(env_str("OBLETH_VAR_DIR", str(BASE_DIR / "var")))

DEBUG = env_bool("OBLETH_DEBUG", False)

SECRET_KEY = env_str("OBLETH_SECRET_KEY")
if not SECRET_KEY:
    if not DEBUG:
        raise ImproperlyConfigured(
            "OBLETH_SECRET_KEY is not set. Set it to a long random string "
            "(python -c 'import secrets; print(secrets.token_urlsafe(50))'), "
            "or set OBLETH_DEBUG=1 for a development instance."
        )
    SECRET_KEY = "obleth-development-only-secret-key-do-not-use-in-production"

# Secrets at rest (JWT, Hugging Face token, endpoint API keys) are encrypted with this key.
OBLETH_ENCRYPTION_KEY = env_str("OBLETH_ENCRYPTION_KEY")
if not OBLETH_ENCRYPTION_KEY:
    if not DEBUG:
        raise ImproperlyConfigured(
            "OBLETH_ENCRYPTION_KEY is not set. It encrypts the Slurm JWT, the Hugging Face token "
            "and endpoint API keys at rest. Set it to a long random string and keep it: changing "
            "it makes stored secrets unreadable. "
            "(OBLETH_DEBUG=1 uses a development key.)"
        )
    OBLETH_ENCRYPTION_KEY = "obleth-development-only-encryption-key"
CRYPTOGRAPHY_KEY = OBLETH_ENCRYPTION_KEY
CRYPTOGRAPHY_SALT = "obleth-secrets-at-rest"

OBLETH_ADMIN_TOKEN = env_str("OBLETH_ADMIN_TOKEN")
if OBLETH_ADMIN_TOKEN and len(OBLETH_ADMIN_TOKEN) < 16:
    raise ImproperlyConfigured(
        "OBLETH_ADMIN_TOKEN is shorter than 16 characters: it grants full API access. Use a long "
        "random value (python -c 'import secrets; print(secrets.token_urlsafe(32))')."
    )

ALLOWED_HOSTS = env_list("OBLETH_ALLOWED_HOSTS", "localhost,127.0.0.1,[::1]" if not DEBUG else "*")
CSRF_TRUSTED_ORIGINS = env_list("OBLETH_CSRF_TRUSTED_ORIGINS")
# ----------------------------------------------------------------------------- TLS and headers
# OBLETH_TLS=1: clients reach obleth over HTTPS only (a TLS-terminating proxy in front, with
# OBLETH_TRUST_X_FORWARDED_PROTO=1, or gunicorn with its own certificate). It turns on secure
# cookies, HSTS and the redirect of plain-HTTP requests to HTTPS (/healthz excepted, for probes).
# Off by default so a plain-HTTP instance (scripts/run, a lab) can log in. See docs/deploy.md.
OBLETH_TLS = env_bool("OBLETH_TLS", False)
# Session and CSRF cookies only over HTTPS (a staff session has full API rights).
SESSION_COOKIE_SECURE = CSRF_COOKIE_SECURE = env_bool("OBLETH_SECURE_COOKIES", OBLETH_TLS)
SESSION_COOKIE_HTTPONLY = True
# Set when a TLS-terminating proxy in front sends X-Forwarded-Proto (and strips it from clients).
if env_bool("OBLETH_TRUST_X_FORWARDED_PROTO", False):
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
# Reverse proxies in front that append the client's address to X-Forwarded-For (an Ingress
# controller, nginx): failed-login limits then count per real client, not per proxy.
OBLETH_TRUSTED_PROXY_COUNT = env_int("OBLETH_TRUSTED_PROXY_COUNT", 0, minimum=0)
# HSTS: sent on HTTPS answers only (Django never sends it over plain HTTP), so it is on with
# either TLS switch. Browsers then refuse plain HTTP to this host for that long.
SECURE_HSTS_SECONDS = env_int(
    "OBLETH_HSTS_SECONDS",
    31536000 if (OBLETH_TLS or SESSION_COOKIE_SECURE) else 0,
    minimum=0,
)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("OBLETH_HSTS_INCLUDE_SUBDOMAINS", True)
# Only matters if someone submits the registrable domain to the browsers' preload list.
SECURE_HSTS_PRELOAD = env_bool("OBLETH_HSTS_PRELOAD", False)
SECURE_SSL_REDIRECT = env_bool("OBLETH_SSL_REDIRECT", OBLETH_TLS)
SECURE_REDIRECT_EXEMPT = [r"^healthz$"]  # load balancer and container probes speak plain HTTP
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
SECURE_CROSS_ORIGIN_OPENER_POLICY = "same-origin"
X_FRAME_OPTIONS = "DENY"
# Content-Security-Policy (django-csp): scripts only from this site, no inline script, no
# framing, no plugins. Inline style *attributes* are allowed (the admin's state badges and
# banners use them); <style> elements and stylesheets only from this site.
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": [CSP_SELF],
        "script-src": [CSP_SELF],
        "style-src": [CSP_SELF, CSP_UNSAFE_INLINE],  # browsers without the two below
        "style-src-elem": [CSP_SELF],
        "style-src-attr": [CSP_UNSAFE_INLINE],
        "img-src": [CSP_SELF, "data:"],
        "font-src": [CSP_SELF, "data:"],
        "connect-src": [CSP_SELF],
        "worker-src": [CSP_SELF],
        "object-src": [CSP_NONE],
        "base-uri": [CSP_SELF],
        "form-action": [CSP_SELF],
        "frame-ancestors": [CSP_NONE],
    }
}

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "django_filters",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "csp",
    "obleth.core",
    "recipes",
    "obleth.api",
    "obleth.gateway",
    "obleth.accounts",
    "provisioner",
]

MIDDLEWARE = [
    "obleth.requestid.RequestIdMiddleware",  # first: every log line of a request has its id
    "django.middleware.security.SecurityMiddleware",
    "csp.middleware.CSPMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "obleth.core.auth_throttle.AdminLoginThrottleMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "obleth.accounts.middleware.AuditContextMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "obleth.urls"
WSGI_APPLICATION = "obleth.wsgi.application"
ASGI_APPLICATION = "obleth.asgi.application"

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
        },
    },
]

# Database: SQLite by default (one command on a fresh machine); PostgreSQL via DATABASE_URL.
_default_db = f"sqlite:///{VAR_DIR / 'obleth.sqlite3'}"
DATABASE_URL = env_str("OBLETH_DATABASE_URL") or env_str("DATABASE_URL") or _default_db
DATABASES = {"default": dj_database_url.parse(DATABASE_URL, conn_max_age=60)}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    DATABASES["default"]["OPTIONS"] = {"timeout": 20, "transaction_mode": "IMMEDIATE"}
    DATABASES["default"]["CONN_MAX_AGE"] = 0
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = env_str("OBLETH_TIME_ZONE", "UTC")
USE_I18N = True
USE_TZ = True
STATIC_URL = "static/"
STATIC_ROOT = VAR_DIR / "static"

REDIS_URL = env_str("OBLETH_REDIS_URL") or env_str("REDIS_URL") or "redis://127.0.0.1:6379/0"

# ----------------------------------------------------------------------------- REST API
REST_FRAMEWORK = {
    "DEFAULT_METADATA_CLASS": "obleth.api.metadata.SafeMetadata",
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "obleth.api.auth.BearerAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["obleth.api.permissions.ModelPermissions"],
    "DEFAULT_FILTER_BACKENDS": ["django_filters.rest_framework.DjangoFilterBackend"],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "DEFAULT_PAGINATION_CLASS": "obleth.api.pagination.OblethPagination",
    "PAGE_SIZE": 50,
    "EXCEPTION_HANDLER": "obleth.api.errors.exception_handler",
    "DEFAULT_PARSER_CLASSES": [
        "obleth.api.parsers.StrictJSONParser",
        "obleth.api.parsers.StrictFormParser",
        "obleth.api.parsers.StrictMultiPartParser",
    ],
    "UNAUTHENTICATED_USER": None,
}
SPECTACULAR_SETTINGS = {
    "TITLE": "obleth Management API",
    "DESCRIPTION": (
        "Models, endpoints, Slurm settings, managed specs, replicas, launches and recipes."
    ),
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    "COMPONENT_SPLIT_REQUEST": True,
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "obleth.api.schema.document_error_answers",
    ],
}

# ----------------------------------------------------------------------------- Celery
CELERY_BROKER_URL = env_str("OBLETH_CELERY_BROKER_URL") or REDIS_URL
CELERY_RESULT_BACKEND = None
CELERY_TASK_IGNORE_RESULT = True
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_TASK_SERIALIZER = "json"
CELERY_TIMEZONE = TIME_ZONE
CELERY_TASK_ALWAYS_EAGER = env_bool("OBLETH_CELERY_EAGER", False)
CELERY_WORKER_HIJACK_ROOT_LOGGER = False

# ----------------------------------------------------------------------------- provisioner knobs
OBLETH_PROVISIONER_INTERVAL_SECS = env_int("OBLETH_PROVISIONER_INTERVAL_SECS", 15, minimum=1)
# Fast passes probe only replicas that are not serving yet: one job listing and a few queries.
# They replace ended jobs and promote ready replicas within about this many seconds. 0 disables.
OBLETH_PROVISIONER_FAST_INTERVAL_SECS = env_int(
    "OBLETH_PROVISIONER_FAST_INTERVAL_SECS", 1, minimum=0
)
OBLETH_PROVISIONER_HEALTH_TIMEOUT_SECS = env_int(
    "OBLETH_PROVISIONER_HEALTH_TIMEOUT_SECS", 5, minimum=1
)
OBLETH_PROVISIONER_WARMUP_TIMEOUT_SECS = env_int(
    "OBLETH_PROVISIONER_WARMUP_TIMEOUT_SECS", 600, minimum=0
)
OBLETH_PROVISIONER_LOST_RETENTION_SECS = env_int(
    "OBLETH_PROVISIONER_LOST_RETENTION_SECS", 900, minimum=0
)
OBLETH_PROVISIONER_RESTART_AFTER_FAILURES = env_int("OBLETH_PROVISIONER_RESTART_AFTER_FAILURES", 20)
OBLETH_PROVISIONER_JOB_PREFIX = env_str("OBLETH_PROVISIONER_JOB_PREFIX", "obleth-") or "obleth-"
OBLETH_PROVISIONER_HELD_ALERT_SECS = env_int("OBLETH_PROVISIONER_HELD_ALERT_SECS", 600, minimum=1)
OBLETH_PROVISIONER_FAILED_NODE_MEMORY_SECS = env_int(
    "OBLETH_PROVISIONER_FAILED_NODE_MEMORY_SECS", 3600, minimum=0
)
OBLETH_PROVISIONER_PROBE_CONCURRENCY = env_int(
    "OBLETH_PROVISIONER_PROBE_CONCURRENCY", 256, minimum=1
)
# Replacement-storm guard: more than N losses of serving replicas of one model within the
# window slow its replacements (backoff) and alert; never stop them. 0 turns the guard off.
OBLETH_PROVISIONER_STORM_LOSSES = env_int("OBLETH_PROVISIONER_STORM_LOSSES", 10, minimum=0)
OBLETH_PROVISIONER_STORM_WINDOW_SECS = env_int(
    "OBLETH_PROVISIONER_STORM_WINDOW_SECS", 600, minimum=1
)
# A replica handed over (walltime successor, spec rollout) leaves routing first; its job is
# cancelled this many seconds later so in-flight streams can finish.
OBLETH_PROVISIONER_DRAIN_SECS = env_int("OBLETH_PROVISIONER_DRAIN_SECS", 30, minimum=0)
# A replica's server drains this long on Slurm's SIGTERM (scancel, preemption, time limit)
# before it is stopped (obleth_serve in the job script; sent as OBLETH_DRAIN_SECS). Keep it
# below the cluster's KillWait / preemption GraceTime, after which Slurm sends SIGKILL.
OBLETH_REPLICA_DRAIN_SECS = env_int("OBLETH_REPLICA_DRAIN_SECS", 10, minimum=0)
# Where a replica's job reaches obleth's web process (the API), e.g. https://obleth.example.org.
# With it set, jobs ask Slurm for a warning signal (USR1, OBLETH_PROVISIONER_WARNING_SIGNAL_SECS
# before their end, and at preemption on clusters with PreemptParameters=send_user_signal) and
# report it back, so a successor starts before the job ends. Unset: no warning signal.
OBLETH_PUBLIC_URL = env_str("OBLETH_PUBLIC_URL", "").rstrip("/")
OBLETH_PROVISIONER_WARNING_SIGNAL_SECS = env_int(
    "OBLETH_PROVISIONER_WARNING_SIGNAL_SECS", 300, minimum=0
)
OBLETH_PROVISIONER_LOCK_TTL_SECS = env_int("OBLETH_PROVISIONER_LOCK_TTL_SECS", 120, minimum=5)
OBLETH_PROVISIONER_DISPATCH = env_str("OBLETH_PROVISIONER_DISPATCH", "celery")  # celery | inline
OBLETH_PORT_SPAN = env_int("OBLETH_PORT_SPAN", 8, minimum=1)
OBLETH_SLURM_TIMEOUT_SECS = env_int("OBLETH_SLURM_TIMEOUT_SECS", 30, minimum=1)

# Gateway endpoint check (a real one-token inference per endpoint, feeds the zombie signal)
OBLETH_MODEL_HEALTH_ENABLED = env_bool("OBLETH_MODEL_HEALTH_ENABLED", True)
OBLETH_MODEL_HEALTH_INTERVAL_SECS = env_int("OBLETH_MODEL_HEALTH_INTERVAL_SECS", 900, minimum=1)
OBLETH_MODEL_HEALTH_TIMEOUT_SECS = env_int("OBLETH_MODEL_HEALTH_TIMEOUT_SECS", 30, minimum=1)
# Health history (each endpoint check, each replica promotion/loss) is kept this many days.
OBLETH_HEALTH_HISTORY_DAYS = env_int("OBLETH_HEALTH_HISTORY_DAYS", 14, minimum=1)
# A serving model's badge turns unhealthy after this many failed checks in a row (degraded before).
OBLETH_MODEL_UNHEALTHY_AFTER_FAILURES = env_int(
    "OBLETH_MODEL_UNHEALTHY_AFTER_FAILURES", 2, minimum=1
)
# A model that served and has had no serving endpoint this long raises one down alert.
OBLETH_MODEL_DOWN_ALERT_SECS = env_int("OBLETH_MODEL_DOWN_ALERT_SECS", 300, minimum=0)
OBLETH_GATEWAY_TIMEOUT_SECS = env_int("OBLETH_GATEWAY_TIMEOUT_SECS", 600, minimum=1)
# Static client keys for /v1 (comma separated), accepted besides the gateway keys stored in the
# database (admin, API, manage.py create_gateway_key). With neither, /v1 refuses every request
# unless OBLETH_GATEWAY_OPEN=1 (then requests without a key are let in: labs only).
OBLETH_GATEWAY_API_KEYS = env_list("OBLETH_GATEWAY_API_KEYS")
OBLETH_GATEWAY_OPEN = env_bool("OBLETH_GATEWAY_OPEN", False)
# How long a gateway process reuses its table of gateway keys (one query to rebuild): a revoked or
# new key takes effect in every process within this time.
OBLETH_GATEWAY_KEY_CACHE_MS = env_int("OBLETH_GATEWAY_KEY_CACHE_MS", 1000, minimum=0)

# The /v1 gateway service (python -m obleth.gateway.serve): its own process, no database on a
# request. Timeouts in seconds; a request that got no first byte within the TTFB timeout moves to
# the next endpoint while nothing has reached the client.
OBLETH_GATEWAY_BIND = env_str("OBLETH_GATEWAY_BIND", "127.0.0.1:8001")
OBLETH_GATEWAY_WORKERS = env_int("OBLETH_GATEWAY_WORKERS", 1, minimum=1)
OBLETH_GATEWAY_RELOAD_SECS = env_int("OBLETH_GATEWAY_RELOAD_SECS", 5, minimum=1)
OBLETH_GATEWAY_CONNECT_TIMEOUT_SECS = env_int("OBLETH_GATEWAY_CONNECT_TIMEOUT_SECS", 5, minimum=1)
OBLETH_GATEWAY_TTFB_TIMEOUT_SECS = env_int("OBLETH_GATEWAY_TTFB_TIMEOUT_SECS", 120, minimum=1)
OBLETH_GATEWAY_STREAM_IDLE_TIMEOUT_SECS = env_int(
    "OBLETH_GATEWAY_STREAM_IDLE_TIMEOUT_SECS", 120, minimum=1
)
OBLETH_GATEWAY_HEADER_TIMEOUT_SECS = env_int("OBLETH_GATEWAY_HEADER_TIMEOUT_SECS", 10, minimum=1)
OBLETH_GATEWAY_BODY_TIMEOUT_SECS = env_int("OBLETH_GATEWAY_BODY_TIMEOUT_SECS", 30, minimum=1)
OBLETH_GATEWAY_KEEPALIVE_SECS = env_int("OBLETH_GATEWAY_KEEPALIVE_SECS", 75, minimum=1)
OBLETH_GATEWAY_MAX_BODY_BYTES = env_int("OBLETH_GATEWAY_MAX_BODY_BYTES", 8 * 1024 * 1024, minimum=1)
OBLETH_GATEWAY_MAX_JSON_CONTAINERS = env_int(
    "OBLETH_GATEWAY_MAX_JSON_CONTAINERS", 100_000, minimum=1
)
OBLETH_GATEWAY_MAX_TRIES = env_int("OBLETH_GATEWAY_MAX_TRIES", 3, minimum=1)
OBLETH_GATEWAY_COOLDOWN_AFTER = env_int("OBLETH_GATEWAY_COOLDOWN_AFTER", 3, minimum=0)
OBLETH_GATEWAY_COOLDOWN_SECS = env_int("OBLETH_GATEWAY_COOLDOWN_SECS", 30, minimum=1)
OBLETH_GATEWAY_ENDPOINT_MAX_CONCURRENCY = env_int(
    "OBLETH_GATEWAY_ENDPOINT_MAX_CONCURRENCY", 0, minimum=0
)
OBLETH_GATEWAY_QUEUE_TIMEOUT_SECS = env_int("OBLETH_GATEWAY_QUEUE_TIMEOUT_SECS", 30, minimum=0)
# A request for a model scaled to zero is held this long while a replica wakes (then 503 with
# Retry-After from the measured start time and Slurm's pending reason). 0: answer 503 at once.
OBLETH_GATEWAY_WAKE_HOLD_SECS = env_int("OBLETH_GATEWAY_WAKE_HOLD_SECS", 120, minimum=0)
OBLETH_GATEWAY_AFFINITY_HEADER = env_str("OBLETH_GATEWAY_AFFINITY_HEADER")
OBLETH_GATEWAY_SHUTDOWN_GRACE_SECS = env_int("OBLETH_GATEWAY_SHUTDOWN_GRACE_SECS", 30, minimum=0)
OBLETH_GATEWAY_ACCESS_LOG = env_bool("OBLETH_GATEWAY_ACCESS_LOG", False)
# Bearer token a Prometheus scraper sends to /metrics; unset: /metrics answers loopback only.
OBLETH_METRICS_TOKEN = env_str("OBLETH_METRICS_TOKEN")

# Failed authentications (admin login, API tokens, gateway keys), per client address and account:
# this many failures within the window block that address or account for the lockout time.
OBLETH_AUTH_MAX_FAILURES = env_int("OBLETH_AUTH_MAX_FAILURES", 10, minimum=0)
OBLETH_AUTH_FAILURE_WINDOW_SECS = env_int("OBLETH_AUTH_FAILURE_WINDOW_SECS", 300, minimum=1)
OBLETH_AUTH_LOCKOUT_SECS = env_int("OBLETH_AUTH_LOCKOUT_SECS", 300, minimum=1)

# Alerts: always logged; e-mail and a Slack-compatible webhook when configured.
OBLETH_ALERT_EMAIL_TO = env_list("OBLETH_ALERT_EMAIL_TO")
OBLETH_ALERT_WEBHOOK_URL = env_str("OBLETH_ALERT_WEBHOOK_URL")
OBLETH_ALERT_MIN_INTERVAL_SECS = env_int("OBLETH_ALERT_MIN_INTERVAL_SECS", 300, minimum=0)
EMAIL_BACKEND = env_str("OBLETH_EMAIL_BACKEND", "django.core.mail.backends.smtp.EmailBackend")
EMAIL_HOST = env_str("OBLETH_EMAIL_HOST", "localhost")
EMAIL_PORT = env_int("OBLETH_EMAIL_PORT", 25)
EMAIL_HOST_USER = env_str("OBLETH_EMAIL_USER")
EMAIL_HOST_PASSWORD = env_str("OBLETH_EMAIL_PASSWORD")
EMAIL_USE_TLS = env_bool("OBLETH_EMAIL_USE_TLS", False)
EMAIL_TIMEOUT = 20
DEFAULT_FROM_EMAIL = env_str("OBLETH_EMAIL_FROM", "obleth@localhost")

# Library recipes (*.recipe): the files shipped in the recipes app, unless the operator names a
# folder of their own.
OBLETH_RECIPES_DIR = Path(env_str("OBLETH_RECIPES_DIR", str(BASE_DIR / "recipes" / "library")))
# Job logs (obleth.core.joblogs): folders where the jobs' stdout/stderr files are readable from
# here, "/same/path" or "/cluster/path=/local/mount", comma separated. Empty: logs are not read
# and the model page says where they are. Only files inside these folders are ever opened.
OBLETH_JOB_LOGS_READABLE = env_list("OBLETH_JOB_LOGS_READABLE")
# How much of a log the model page and the API send at most (the tail), in KiB.
OBLETH_JOB_LOGS_MAX_KIB = env_int("OBLETH_JOB_LOGS_MAX_KIB", 256, minimum=1)
# How often the model page refreshes its live panel, in seconds.
OBLETH_COCKPIT_REFRESH_SECS = env_int("OBLETH_COCKPIT_REFRESH_SECS", 3, minimum=1)
# Where engines that Slurm jobs run on this machine are installed (readable by the job user):
# scripts/real-engines and the test engine copy used by the demo recipe ({{test_engine}}).
OBLETH_ENGINES_DIR = Path(env_str("OBLETH_ENGINES_DIR", "/opt/obleth-engines"))

CELERY_BEAT_SCHEDULE = {
    "provisioner-pass": {
        "task": "provisioner.tasks.reconcile_pass",
        "schedule": float(OBLETH_PROVISIONER_INTERVAL_SECS),
        "options": {"expires": float(OBLETH_PROVISIONER_INTERVAL_SECS)},
    },
    **(
        {
            "provisioner-fast-pass": {
                "task": "provisioner.tasks.reconcile_fast_pass",
                "schedule": float(OBLETH_PROVISIONER_FAST_INTERVAL_SECS),
                "options": {"expires": float(OBLETH_PROVISIONER_FAST_INTERVAL_SECS)},
            }
        }
        if OBLETH_PROVISIONER_FAST_INTERVAL_SECS
        else {}
    ),
    "gateway-endpoint-checks": {
        "task": "obleth.gateway.tasks.check_due_endpoints",
        "schedule": 30.0,
        "options": {"expires": 30.0},
    },
}

OBLETH_LOG_FORMAT = (env_str("OBLETH_LOG_FORMAT", "plain") or "plain").strip().lower()
if OBLETH_LOG_FORMAT not in ("plain", "json"):
    raise ImproperlyConfigured(
        f"OBLETH_LOG_FORMAT={OBLETH_LOG_FORMAT!r}: use plain (the default) or json "
        "(one JSON object per line, with request_id and pass_id)."
    )
# Celery's own per-task lines ("Sending due task", "received", "succeeded") at INFO are about
# 4 lines a second at idle with fast passes; they are DEBUG-level detail for an operator.
_CELERY_CHATTER_LEVEL = "DEBUG" if env_bool("OBLETH_LOG_CELERY_TASKS", False) else "WARNING"
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    # The redaction filter runs first, so no formatter or later filter sees a secret.
    "filters": {
        "redact": {"()": "obleth.logging.RedactSecretsFilter"},
        "context": {"()": "obleth.logging.ContextFilter"},
    },
    "formatters": {
        "plain": {
            "()": "obleth.logging.PlainFormatter",
            "format": "%(asctime)s %(levelname)s %(name)s: %(message)s",
        },
        "json": {"()": "obleth.logging.JsonFormatter"},
    },
    "handlers": {
        "console": {
            "class": "logging.StreamHandler",
            "formatter": OBLETH_LOG_FORMAT,
            "filters": ["redact", "context"],
        }
    },
    "root": {"handlers": ["console"], "level": env_str("OBLETH_LOG_LEVEL", "INFO").upper()},
    "loggers": {
        "httpx": {"level": "WARNING"},
        "httpcore": {"level": "WARNING"},
        "celery.beat": {"level": _CELERY_CHATTER_LEVEL},
        "celery.worker.strategy": {"level": _CELERY_CHATTER_LEVEL},
        "celery.app.trace": {"level": _CELERY_CHATTER_LEVEL},
    },
}

# Static files (admin, Swagger UI) are served by WhiteNoise; finders let it work before
# collectstatic has run (scripts/run runs it).
WHITENOISE_USE_FINDERS = True
