#!/usr/bin/env bash
# Side-by-side with peers (optional, not part of CI): installs LiteLLM's proxy into a throwaway
# venv and Portkey's gateway from npm, and Debian's nginx when missing (as root, as .ci/provision
# does), then runs bench/peers.py: the same whole and streamed OpenAI load through the
# pass-through, the chat-gateway, nginx, LiteLLM and Portkey against one mock.
#
#   bench/compare_peers.sh [--quick] [any bench/peers.py option...]
#
# PEERS_DIR (default /tmp/chat-gateway-peers) holds the throwaway installs; they are reused when
# present (delete the directory to upgrade). Needs pip and npm to reach their registries once;
# the runs themselves are offline (everything on 127.0.0.1, telemetry off). Every peer is
# optional: without npm/node (Portkey), apt-get or root (nginx), or if an install fails, its rows
# say so and the rest is measured. nginx runs as its own process from a generated config (the
# system service is never started). PEERS_PYTHON: the Python with the project's dependencies
# (default .venv/bin/python).
# LITELLM_SPEC / PORTKEY_SPEC pin versions, e.g. LITELLM_SPEC='litellm[proxy]==1.74.0',
# PORTKEY_SPEC='@portkey-ai/gateway@1.15.2'.
# See docs/performance.md, "Peers (optional)".
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DIR="${PEERS_DIR:-/tmp/chat-gateway-peers}"
LITELLM_SPEC="${LITELLM_SPEC:-litellm[proxy]}"
PORTKEY_SPEC="${PORTKEY_SPEC:-@portkey-ai/gateway@latest}"
PY="${PEERS_PYTHON:-$ROOT/.venv/bin/python}"
mkdir -p "$DIR"

if [[ ! -x "$PY" ]]; then
    echo "compare_peers: $PY not found; set up the project's venv first (make bench)" >&2
    exit 1
fi

# --- LiteLLM -------------------------------------------------------------------------------------
LITELLM="$DIR/litellm/bin/litellm"
if [[ ! -x "$LITELLM" ]]; then
    echo "compare_peers: installing $LITELLM_SPEC into $DIR/litellm (a few minutes)"
    if python3 -m venv "$DIR/litellm" \
        && "$DIR/litellm/bin/pip" install -q --disable-pip-version-check "$LITELLM_SPEC" \
            >"$DIR/litellm-install.log" 2>&1; then
        echo "compare_peers: LiteLLM $("$DIR/litellm/bin/python" -c \
            'import importlib.metadata as m; print(m.version("litellm"))') installed"
    else
        echo "compare_peers: LiteLLM install failed (see $DIR/litellm-install.log); skipping it" >&2
        LITELLM=none
    fi
fi
[[ -x "$LITELLM" ]] || LITELLM=none

# --- Portkey -------------------------------------------------------------------------------------
PORTKEY="$DIR/portkey/node_modules/@portkey-ai/gateway/build/start-server.js"
if [[ ! -f "$PORTKEY" ]]; then
    if ! command -v npm >/dev/null 2>&1 || ! command -v node >/dev/null 2>&1; then
        echo "compare_peers: npm or node not found; skipping Portkey" >&2
        PORTKEY=none
    else
        echo "compare_peers: installing $PORTKEY_SPEC into $DIR/portkey"
        mkdir -p "$DIR/portkey"
        # @hono/node-server newer than 1.14.2 breaks Portkey's answers on Node with "TypeError:
        # immutable" (Portkey-AI/gateway#1389): pinned for the whole tree. Its streams need a
        # fetch shim on top, which bench/peers.py preloads when they fail without it.
        cat >"$DIR/portkey/package.json" <<EOF
{"private": true, "dependencies": {"@portkey-ai/gateway": "${PORTKEY_SPEC#@portkey-ai/gateway@}"},
 "overrides": {"@hono/node-server": "${HONO_NODE_SERVER:-1.14.2}"}}
EOF
        if (cd "$DIR/portkey" && npm install --no-audit --no-fund) \
                >"$DIR/portkey-install.log" 2>&1 && [[ -f "$PORTKEY" ]]; then
            echo "compare_peers: Portkey gateway installed"
        else
            echo "compare_peers: Portkey install failed or has no build/start-server.js" \
                 "(see $DIR/portkey-install.log); skipping it" >&2
            PORTKEY=none
        fi
    fi
fi
[[ -f "$PORTKEY" ]] || PORTKEY=none

# --- nginx ---------------------------------------------------------------------------------------
NGINX="$(command -v nginx || true)"
[[ -n "$NGINX" || ! -x /usr/sbin/nginx ]] || NGINX=/usr/sbin/nginx
if [[ -z "$NGINX" ]]; then
    if command -v apt-get >/dev/null 2>&1 && [[ "$(id -u)" -eq 0 ]]; then
        echo "compare_peers: installing Debian's nginx (apt-get)"
        # if Debian starts its own nginx service (no policy-rc.d), that one is not the one measured
        if { DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 update -qq \
             && DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 \
                install -y -qq --no-install-recommends nginx; } >"$DIR/nginx-install.log" 2>&1 \
           && [[ -x /usr/sbin/nginx ]]; then
            NGINX=/usr/sbin/nginx
        else
            echo "compare_peers: nginx install failed (see $DIR/nginx-install.log); skipping it" >&2
        fi
    else
        echo "compare_peers: nginx not found and not root with apt-get; skipping nginx" \
             "(install Debian's nginx package to measure it)" >&2
    fi
fi
[[ -n "$NGINX" ]] || NGINX=none

# --- the runs ------------------------------------------------------------------------------------
cd "$ROOT"
exec "$PY" bench/peers.py --nginx "$NGINX" --litellm "$LITELLM" --portkey "$PORTKEY" "$@"
