#!/usr/bin/env bash
# Side-by-side benchmark setup (from ../shared/peers/oxide; the token is made with batch_token): oxide_batch under gunicorn on a throwaway PostgreSQL 15 cluster,
# the counterpart of peers/prefect/setup.sh (same stock durability settings, pg_stat_statements loaded).
# Everything lives under <tmp>/peer-oxide (server.env, gunicorn.log, token) and <tmp>/peer-oxide-pg (cluster);
# the working copy of the product is a clone at $APP_DIR (default <tmp>/perf/app) with its own .venv.
# Usage:  bash setup.sh                         # clone + venv (if missing), cluster on a free port, fresh db, gunicorn sync
#         VARIANT=gthread bash setup.sh         # gunicorn --worker-class gthread --threads ${THREADS:-4} (keep-alive)
#         WORKERS=2 SRC=DIR APP_DIR=...     # defaults: workers = cores, source = the git checkout you run it from
# A second setup.sh while a server runs refuses; teardown.sh stops server and cluster (PIDs from server.env).
# The cluster stays up across `SERVER_ONLY=1 bash setup.sh` (restarts only gunicorn, keeps the database).
set -euo pipefail

TMPROOT=$(python3 -c 'import tempfile; print(tempfile.gettempdir())')
ROOT=$TMPROOT/peer-oxide
PGDIR=$TMPROOT/peer-oxide-pg
SRC=${SRC:-$(git rev-parse --show-toplevel 2>/dev/null || pwd)}
APP_DIR=${APP_DIR:-$TMPROOT/perf/app}
VARIANT=${VARIANT:-sync}
WORKERS=${WORKERS:-$(nproc)}
THREADS=${THREADS:-4}
DB=oxide
mkdir -p "$ROOT"

# 0. refuse while a server from a previous setup still runs
if [ -f "$ROOT/server.env" ]; then
  OLDPID=$(sed -n 's/^GUNICORN_PID=//p' "$ROOT/server.env")
  if [ -n "$OLDPID" ] && kill -0 "$OLDPID" 2>/dev/null; then
    echo "gunicorn pid $OLDPID still running: run teardown.sh (or SERVER_ONLY=1 teardown.sh) first" >&2; exit 1
  fi
fi

# 1. working copy + venv (runtime dependencies only: Django, DRF, psycopg, gunicorn)
if [ ! -d "$APP_DIR/.git" ]; then git clone -q "$SRC" "$APP_DIR"; fi
echo "app $APP_DIR at $(git -C "$APP_DIR" log -1 --format='%h %s' | cut -c1-100)"
if [ ! -x "$APP_DIR/.venv/bin/gunicorn" ]; then
  python3 -m venv "$APP_DIR/.venv"
  "$APP_DIR/.venv/bin/pip" install -q --disable-pip-version-check -e "$APP_DIR[service]"
fi
PY=$APP_DIR/.venv/bin/python

# 2. throwaway cluster, stock durability (fsync, synchronous_commit on), on a free port, as postgres
if [ ! -f "$PGDIR/data/PG_VERSION" ]; then
  mkdir -p "$PGDIR" && chown postgres "$PGDIR"
  runuser -u postgres -- initdb -D "$PGDIR/data" -A trust -U postgres >"$PGDIR/initdb.log"
fi
if ! runuser -u postgres -- pg_ctl -D "$PGDIR/data" status >/dev/null 2>&1; then
  PGPORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  runuser -u postgres -- pg_ctl -D "$PGDIR/data" \
    -o "-p $PGPORT -k $PGDIR -c listen_addresses=127.0.0.1 -c shared_preload_libraries=pg_stat_statements -c log_line_prefix='%m [%p] %d '" \
    -l "$PGDIR/log" -w start >/dev/null
  echo "$PGPORT" >"$PGDIR/port"
fi
PGPORT=$(cat "$PGDIR/port")
PSQL="psql -X -q -h 127.0.0.1 -p $PGPORT -U postgres"
$PSQL -d postgres -Atc "SELECT 'cluster ' || version() || ', fsync=' || current_setting('fsync') || ', synchronous_commit=' || current_setting('synchronous_commit') || ', shared_buffers=' || current_setting('shared_buffers')"

export DATABASE_URL="postgres://postgres@127.0.0.1:$PGPORT/$DB"
export DEBUG=false ALLOWED_HOSTS=127.0.0.1 PYTHONUNBUFFERED=1
if [ ! -f "$ROOT/secret_key" ]; then python3 -c 'import secrets; print(secrets.token_urlsafe(50))' >"$ROOT/secret_key"; fi
export SECRET_KEY=$(cat "$ROOT/secret_key")

# 3. fresh database, migrations, a runtime user with a token (skipped with SERVER_ONLY=1)
if [ "${SERVER_ONLY:-0}" != 1 ]; then
  $PSQL -d postgres -c "DROP DATABASE IF EXISTS $DB" -c "CREATE DATABASE $DB"
  $PSQL -d $DB -c "CREATE EXTENSION IF NOT EXISTS pg_stat_statements"
  (cd "$APP_DIR" && "$PY" manage.py migrate --noinput -v 0)
  # A hashed API token (decision 109), printed once on stdout.
  (cd "$APP_DIR" && "$PY" manage.py batch_token -v 0 create --user peer-bench-runtime \
    --create-user --group batch-runtime --name peer-bench --replace) >"$ROOT/token"
  test -s "$ROOT/token"
fi

# 4. gunicorn, workers = cores, bound to 127.0.0.1 on a free port; its output (events included) to a file
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
GARGS=(--workers "$WORKERS" --bind "127.0.0.1:$PORT" --pid "$ROOT/gunicorn.pid" --chdir "$APP_DIR")
if [ "$VARIANT" = gthread ]; then GARGS+=(--worker-class gthread --threads "$THREADS"); fi
rm -f "$ROOT/gunicorn.pid"
setsid nohup "$APP_DIR/.venv/bin/gunicorn" "${GARGS[@]}" project.wsgi:application \
  >"$ROOT/gunicorn-$VARIANT.log" 2>&1 </dev/null &
for i in $(seq 1 60); do
  if curl -sf "http://127.0.0.1:$PORT/healthz" >/dev/null 2>&1; then break; fi
  sleep 0.5
done
curl -sf "http://127.0.0.1:$PORT/healthz" >/dev/null || { echo "gunicorn not answering, see $ROOT/gunicorn-$VARIANT.log" >&2; exit 1; }
GPID=$(cat "$ROOT/gunicorn.pid")
# one authenticated request proves the token and the role
curl -sf -H "Authorization: Token $(cat "$ROOT/token")" "http://127.0.0.1:$PORT/api/v1/descriptor" >/dev/null
cat >"$ROOT/server.env" <<EOF
OXIDE_BENCH_URL=http://127.0.0.1:$PORT
OXIDE_TOKEN=$(cat "$ROOT/token")
GUNICORN_PID=$GPID
GUNICORN_VARIANT=$VARIANT$([ "$VARIANT" = gthread ] && echo "-$THREADS")
GUNICORN_WORKERS=$WORKERS
GUNICORN_LOG=$ROOT/gunicorn-$VARIANT.log
PG_PORT=$PGPORT
PG_DATADIR=$PGDIR/data
APP_DIR=$APP_DIR
EOF
echo "gunicorn pid $GPID ($VARIANT, $WORKERS workers) at http://127.0.0.1:$PORT, $("$APP_DIR/.venv/bin/gunicorn" --version)"
cat "$ROOT/server.env" | grep -v TOKEN
