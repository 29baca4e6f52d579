#!/usr/bin/env bash
# Prepare a local run: migrate, and create (once) a dev workspace, API key and Flower login.
# Prints the values; `make run` sources the env file this writes (`export NAME=value` lines).
set -euo pipefail
mkdir -p var
EVIDENCE=${EVIDENCE:-.venv/bin/evidence}

"$EVIDENCE" migrate >/dev/null
if [ ! -s var/dev.env ]; then
  workspace=$(python3 -c 'import uuid; print(uuid.uuid4())')
  key=$("$EVIDENCE" keys create --workspace "$workspace" 2>/dev/null | tail -n 1)
  flower="admin:$(python3 -c 'import secrets; print(secrets.token_urlsafe(12))')"
  umask 077
  # `export` lines: `. var/dev.env` in a shell must hand them to the commands run from it.
  {
    printf 'export EVIDENCE_DEV_WORKSPACE=%q\n' "$workspace"
    printf 'export EVIDENCE_API_KEY=%q\n' "$key"
    printf 'export EVIDENCE_FLOWER_BASIC_AUTH=%q\n' "${EVIDENCE_FLOWER_BASIC_AUTH:-$flower}"
  } > var/dev.env
elif grep -q '^EVIDENCE_' var/dev.env; then
  # Written by an older version without `export`: add it, keeping the values.
  sed -i 's/^EVIDENCE_/export EVIDENCE_/' var/dev.env
fi
# shellcheck disable=SC1091
. var/dev.env
cat <<MSG
------------------------------------------------------------------
 API        http://127.0.0.1:${EVIDENCE_API_PORT:-8000}   (docs: /docs)
 Flower     http://127.0.0.1:${EVIDENCE_FLOWER_PORT:-5555}   login: ${EVIDENCE_FLOWER_BASIC_AUTH}
 workspace  ${EVIDENCE_DEV_WORKSPACE}
 API key    ${EVIDENCE_API_KEY}
 (kept in var/dev.env)
------------------------------------------------------------------
MSG
