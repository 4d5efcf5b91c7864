#!/usr/bin/env bash
# obleth container entrypoint. One image for every role; the first argument picks it:
#
#   web          gunicorn, WSGI with threads: the admin and the Management API (/v1 is the
#                gateway's; the web process answers it with a 404 saying so)
#   gateway      the /v1 data plane (python -m obleth.gateway.serve: uvicorn, one event loop per
#                worker process; OBLETH_GATEWAY_BIND, OBLETH_GATEWAY_WORKERS). Scale it on its own.
#   worker       celery worker (one task per model in a pass, replica warm-ups, endpoint checks)
#   beat         celery beat: schedules the provisioner pass and the endpoint checks.
#                Run exactly ONE per site.
#   loop         manage.py reconcile --loop: the provisioner without Celery or Redis, for small
#                sites (instead of worker + beat; exactly one). SIGTERM ends it after the pass.
#   migrate      manage.py migrate, then ensure_admin when OBLETH_ADMIN_PASSWORD is set.
#                Run once before web starts, and on every upgrade.
#   manage ARGS  manage.py ARGS (e.g. manage reconcile --dry-run)
#   healthcheck  the image's HEALTHCHECK: web and gateway answer /healthz; other roles have no
#                HTTP check
#   help         this text
#
# Arguments after the role go to the program and override the defaults below, e.g.
# `web --graceful-timeout 120`. Anything else that is a command on PATH is run as is (`bash`).
#
# Environment read here (settings themselves are read by obleth/settings.py):
#   OBLETH_BIND=0.0.0.0:8000      web: where gunicorn listens
#   OBLETH_WEB_WORKERS=2          web: gunicorn processes
#   OBLETH_WEB_THREADS=16         web: threads per process (each stream holds one)
#   OBLETH_WORKER_CONCURRENCY=4   worker: celery processes
#   OBLETH_BEAT_SCHEDULE          beat: schedule file (default $TMPDIR/celerybeat-schedule)
#   OBLETH_ADMIN_USERNAME=admin   migrate: superuser created once if OBLETH_ADMIN_PASSWORD is set
#   OBLETH_APP_DIR=/app           where manage.py lives (set by the image)
#   OBLETH_ENTRYPOINT_DRY_RUN=1   print each command ("run: ...", shell-quoted) and each variable
#                                 set here ("env: NAME=value") instead of running anything
#                                 (used by tests/test_deploy_files.py)
set -euo pipefail

APP_DIR="${OBLETH_APP_DIR:-/app}"
ROLE_FILE="${TMPDIR:-/tmp}/obleth-role"
DRY_RUN="${OBLETH_ENTRYPOINT_DRY_RUN:-0}"

usage() {
    sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed -e '$d' -e 's/^# \{0,1\}//'
}

die() {
    echo "obleth-entrypoint: $*" >&2
    exit 64
}

is_true() {
    case "${1,,}" in 1 | true | yes | on) return 0 ;; *) return 1 ;; esac
}

# Export a variable for the role's program (printed as "env: NAME=value" in a dry run).
export_var() {
    export "$1=$2"
    if is_true "$DRY_RUN"; then
        printf 'env: %s=%s\n' "$1" "$2"
    fi
}

# Print (dry run) or run a command that must finish before the next one.
step() {
    if is_true "$DRY_RUN"; then
        printf 'run:'
        printf ' %q' "$@"
        printf '\n'
        return 0
    fi
    "$@"
}

# Print (dry run) or become the role's program (exec: it gets the signals directly).
run() {
    if is_true "$DRY_RUN"; then
        step "$@"
        exit 0
    fi
    exec "$@"
}

# Fail early, naming the variable and the fix, instead of a Django traceback or a silent
# per-container SQLite database.
require_settings() {
    local role="$1"
    if is_true "${OBLETH_DEBUG:-0}"; then
        return 0
    fi
    [ -n "${OBLETH_SECRET_KEY:-}" ] || die "OBLETH_SECRET_KEY is not set (role $role): set it to a" \
        "long random string, e.g. python -c 'import secrets; print(secrets.token_urlsafe(50))'."
    [ -n "${OBLETH_ENCRYPTION_KEY:-}" ] || die "OBLETH_ENCRYPTION_KEY is not set (role $role):" \
        "set it to a long random string and KEEP it (stored Slurm JWT, Hugging Face token and" \
        "endpoint API keys are unreadable without the key they were written with)."
    [ -n "${DATABASE_URL:-}${OBLETH_DATABASE_URL:-}" ] || die "DATABASE_URL is not set (role" \
        "$role): set it to the PostgreSQL URL, e.g. postgres://obleth:PASSWORD@db:5432/obleth" \
        "(without it every container would use its own SQLite file)."
}

require_broker() {
    local role="$1"
    [ -n "${REDIS_URL:-}${OBLETH_REDIS_URL:-}${OBLETH_CELERY_BROKER_URL:-}" ] || die \
        "REDIS_URL is not set (role $role): set it to the Celery broker, e.g." \
        "redis://redis:6379/0, or run the provisioner as role 'loop' instead of worker + beat."
}

go_to_app() {
    cd "$APP_DIR" 2>/dev/null || die "OBLETH_APP_DIR=$APP_DIR is not a directory: set it to the" \
        "directory holding manage.py (the image uses /app)."
}

healthcheck() {
    local role
    role="$(cat "$ROLE_FILE" 2>/dev/null || echo web)"
    if [ "$role" != "web" ] && [ "$role" != "gateway" ]; then
        echo "healthcheck: role $role has no HTTP check (its process is alive)"
        return 0
    fi
    # Any HTTP answer below 500 from /healthz means the web process (or the gateway) serves.
    OBLETH_CHECKED_ROLE="$role" python - <<'PY'
import os
import sys
import urllib.error
import urllib.request

role = os.environ["OBLETH_CHECKED_ROLE"]
if role == "gateway":
    bind = os.environ.get("OBLETH_GATEWAY_BIND", "0.0.0.0:8001")
else:
    bind = os.environ.get("OBLETH_BIND", "0.0.0.0:8000")
port = bind.rsplit(":", 1)[-1]
if not port.isdigit():
    print(f"healthcheck: cannot check OBLETH_BIND={bind!r} (not HOST:PORT)")
    sys.exit(1)
hosts = [h.strip() for h in os.environ.get("OBLETH_ALLOWED_HOSTS", "").split(",") if h.strip()]
host = next((h.lstrip(".") for h in hosts if h != "*"), "localhost")
request = urllib.request.Request(
    f"http://127.0.0.1:{port}/healthz", headers={"Host": host}
)
try:
    with urllib.request.urlopen(request, timeout=5) as response:
        status = response.status
except urllib.error.HTTPError as exc:
    status = exc.code
except OSError as exc:
    print(f"healthcheck: {role} does not answer on 127.0.0.1:{port}: {exc}")
    sys.exit(1)
print(f"healthcheck: {role} answered HTTP {status}")
sys.exit(0 if status < 500 else 1)
PY
}

role="${1:-}"
[ $# -gt 0 ] && shift

case "$role" in
    web | gateway | worker | beat | loop | migrate | manage)
        echo "$role" >"$ROLE_FILE" 2>/dev/null || true
        ;;
esac

case "$role" in
    web)
        require_settings web
        go_to_app
        # The config module redacts secrets (?api_key=..., Authorization) in the access log.
        run gunicorn obleth.wsgi:application \
            --config python:obleth.gunicorn_conf \
            --bind "${OBLETH_BIND:-0.0.0.0:8000}" \
            --worker-class gthread \
            --workers "${OBLETH_WEB_WORKERS:-2}" \
            --threads "${OBLETH_WEB_THREADS:-16}" \
            --timeout 0 \
            --no-control-socket \
            --access-logfile - \
            "$@"
        ;;
    gateway)
        require_settings gateway
        go_to_app
        run python -m obleth.gateway.serve \
            --bind "${OBLETH_GATEWAY_BIND:-0.0.0.0:8001}" \
            --workers "${OBLETH_GATEWAY_WORKERS:-1}" \
            "$@"
        ;;
    worker)
        require_settings worker
        require_broker worker
        go_to_app
        run celery -A obleth worker \
            --loglevel "${OBLETH_LOG_LEVEL:-INFO}" \
            --concurrency "${OBLETH_WORKER_CONCURRENCY:-4}" \
            "$@"
        ;;
    beat)
        require_settings beat
        require_broker beat
        go_to_app
        run celery -A obleth beat \
            --loglevel "${OBLETH_LOG_LEVEL:-INFO}" \
            --schedule "${OBLETH_BEAT_SCHEDULE:-${TMPDIR:-/tmp}/celerybeat-schedule}" \
            "$@"
        ;;
    loop)
        require_settings loop
        go_to_app
        # No Celery workers in this mode: everything a pass does happens in this process.
        if [ "${OBLETH_PROVISIONER_DISPATCH:-inline}" != "inline" ]; then
            echo "obleth-entrypoint: loop: OBLETH_PROVISIONER_DISPATCH=inline" \
                "(was ${OBLETH_PROVISIONER_DISPATCH}; there are no Celery workers)" >&2
        fi
        export_var OBLETH_PROVISIONER_DISPATCH inline
        run python manage.py reconcile --loop "$@"
        ;;
    migrate)
        require_settings migrate
        go_to_app
        if [ -n "${OBLETH_ADMIN_PASSWORD:-}" ]; then
            step python manage.py migrate --noinput "$@"
            run python manage.py ensure_admin --username "${OBLETH_ADMIN_USERNAME:-admin}" \
                --password-env OBLETH_ADMIN_PASSWORD
        fi
        run python manage.py migrate --noinput "$@"
        ;;
    manage)
        go_to_app
        run python manage.py "$@"
        ;;
    healthcheck)
        healthcheck
        ;;
    help | -h | --help)
        usage
        ;;
    "")
        usage >&2
        die "no role given: pass one of web, worker, beat, loop, migrate, manage, healthcheck."
        ;;
    *)
        if command -v "$role" >/dev/null 2>&1; then
            run "$role" "$@"
        fi
        usage >&2
        die "unknown role '$role': pass one of web, worker, beat, loop, migrate, manage," \
            "healthcheck, or a command on PATH."
        ;;
esac
