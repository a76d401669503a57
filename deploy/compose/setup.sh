#!/usr/bin/env bash
# One-time setup for `docker compose up` (see docker-compose.yml): writes, unless already there,
#   deploy/compose/rca.env          the settings (a copy of rca.env.example; edit it)
#   deploy/compose/secrets/*        the Docker secret files: a random Postgres password and the
#                                   database URL that uses it, random webhook and API tokens, and
#                                   the optional secrets (Slack, LLM key, trace headers) as empty
#                                   files, read only once rca.env names them with RCA_*_FILE.
# Usage: deploy/compose/setup.sh [DIR]   (DIR defaults to this script's directory)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
dir="${1:-$here}"
secrets="$dir/secrets"

random() { od -An -N24 -tx1 /dev/urandom | tr -d ' \n'; }

mkdir -p "$secrets"
chmod 700 "$secrets"  # only this user (and the Docker daemon) can reach the files on the host...
umask 022             # ...and the container's unprivileged `rca` user can read its bind-mounted copy
[ -e "$dir/rca.env" ] || cp "$here/rca.env.example" "$dir/rca.env"
if [ ! -s "$secrets/postgres_password" ]; then
  random > "$secrets/postgres_password"
  rm -f "$secrets/database_url"  # derived from the password
fi
[ -s "$secrets/database_url" ] \
  || echo "postgresql+psycopg://rca:$(cat "$secrets/postgres_password")@postgres:5432/rca" > "$secrets/database_url"
[ -s "$secrets/webhook_token" ] || random > "$secrets/webhook_token"
[ -s "$secrets/api_tokens" ] || random > "$secrets/api_tokens"
for name in slack_webhook_url slack_bot_token slack_signing_secret llm_api_key traces_headers; do
  [ -e "$secrets/$name" ] || : > "$secrets/$name"
done
echo "settings: $dir/rca.env (set RCA_PROMETHEUS_URL there); secrets: $secrets/"
echo "Alertmanager's bearer token is in $secrets/webhook_token, the API token in $secrets/api_tokens"
