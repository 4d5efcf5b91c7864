# Shared helpers for scripts/run and scripts/test. Sourced, not executed.
# shellcheck shell=bash

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${OBLETH_VENV:-$ROOT/.venv}"
PY="$VENV/bin/python"

log() { printf '[obleth] %s\n' "$*" >&2; }
die() { printf '[obleth] error: %s\n' "$*" >&2; exit 1; }

# Create the virtualenv and install pinned requirements; a no-op when they have not changed.
ensure_venv() {
    local req="$ROOT/requirements/${1:-dev}.txt" stamp
    if [ ! -x "$PY" ]; then
        local base
        base="$(command -v python3.11 || command -v python3)" || die "python3.11 is needed"
        "$base" -c 'import sys; assert sys.version_info[:2] == (3, 11), sys.version' \
            || die "$base is not Python 3.11"
        log "creating virtualenv in $VENV"
        "$base" -m venv "$VENV"
        "$PY" -m pip install -q --upgrade pip >/dev/null
    fi
    stamp="$VENV/.obleth-req-$(cat "$ROOT"/requirements/*.txt | sha256sum | cut -c1-16)-${1:-dev}"
    if [ ! -e "$stamp" ]; then
        log "installing requirements/${1:-dev}.txt"
        "$PY" -m pip install -q -r "$req" || die "pip install -r $req failed"
        rm -f "$VENV"/.obleth-req-*
        touch "$stamp"
    fi
}

# Ready means answering queries, not only accepting connections (a starting PostgreSQL accepts
# them and says "the database system is starting up"; a loading Redis answers LOADING).
pg_up() {
    if command -v pg_isready >/dev/null; then
        pg_isready -h 127.0.0.1 -p 5432 -q
    else
        (exec 3<>/dev/tcp/127.0.0.1/5432) 2>/dev/null
    fi
}
redis_up() {  # [HOST [PORT]], default 127.0.0.1 6379
    local host=${1:-127.0.0.1} port=${2:-6379}
    if command -v redis-cli >/dev/null; then
        [ "$(redis-cli -h "$host" -p "$port" ping 2>/dev/null)" = "PONG" ]
    else
        (exec 3<>"/dev/tcp/$host/$port") 2>/dev/null
    fi
}

apt_install() {
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$@" >/dev/null 2>&1 && return 0
    DEBIAN_FRONTEND=noninteractive apt-get update -q >/dev/null 2>&1
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$@" >/dev/null
}

# Start PostgreSQL when it is not answering (this machine kind has it installed, not always running).
ensure_postgres() {
    pg_up && return 0
    log "starting PostgreSQL"
    if ! command -v pg_ctlcluster >/dev/null; then
        apt_install postgresql || die "PostgreSQL is not installed and apt-get install postgresql failed"
    fi
    [ -d /etc/postgresql ] || die "no PostgreSQL cluster is configured (/etc/postgresql is missing)"
    local version
    version="$(ls /etc/postgresql | sort -V | tail -1)"
    pg_ctlcluster --skip-systemctl-redirect "$version" main start || die "pg_ctlcluster start failed"
    for _ in $(seq 1 50); do pg_up && return 0; sleep 0.2; done
    die "PostgreSQL did not answer on 127.0.0.1:5432"
}

ensure_redis() {
    redis_up && return 0
    log "starting Redis"
    if ! command -v redis-server >/dev/null; then
        apt_install redis-server || die "Redis is not installed and apt-get install redis-server failed"
    fi
    mkdir -p /var/lib/redis /var/log/redis
    redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save "" --appendonly no \
        --dir /var/lib/redis --logfile /var/log/redis/ci.log || die "redis-server failed to start"
    for _ in $(seq 1 50); do redis_up && return 0; sleep 0.2; done
    die "Redis did not answer on 127.0.0.1:6379"
}
