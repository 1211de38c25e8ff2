# shellcheck shell=bash
# Variables set here are used by the scripts that source this file.
# shellcheck disable=SC2034
# Shared helpers for scripts/up, scripts/down, scripts/status, scripts/env and
# scripts/demo. Source it; do not execute it.
#
# Configuration (environment):
#   FLOWFORGE_DATABASE_URL  default postgres://postgres@127.0.0.1:5432/flowforge?sslmode=disable
#   FLOWFORGE_AMQP_URL      default amqp://guest:guest@127.0.0.1:5672/
#   FLOWFORGE_STATE_DIR     default <checkout>/.flowforge-state (git-ignored)
#
# State layout (everything scripts/up starts is recorded here, nothing else):
#   $STATE_DIR/compose.env                     compose project + services started
#   $STATE_DIR/postgres-<port>/owner.env       private PostgreSQL (data/, log)
#   $STATE_DIR/rabbitmq-<port>/owner.env       private RabbitMQ node (mnesia/, log/)

FF_DEFAULT_DATABASE_URL='postgres://postgres@127.0.0.1:5432/flowforge?sslmode=disable'
FF_DEFAULT_AMQP_URL='amqp://guest:guest@127.0.0.1:5672/'

FF_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
FF_STATE_DIR="${FLOWFORGE_STATE_DIR:-$FF_ROOT/.flowforge-state}"
FF_COMPOSE_FILE="$FF_ROOT/compose.yml"
FF_COMPOSE_PROJECT="${FLOWFORGE_COMPOSE_PROJECT:-flowforge}"

FF_DATABASE_URL="${FLOWFORGE_DATABASE_URL:-$FF_DEFAULT_DATABASE_URL}"
FF_AMQP_URL="${FLOWFORGE_AMQP_URL:-$FF_DEFAULT_AMQP_URL}"

log() { printf '%s\n' "$*"; }
warn() { printf 'warning: %s\n' "$*" >&2; }
die() {
	printf 'error: %s\n' "$*" >&2
	exit 1
}

# parse_url URL DEFAULT_PORT -> sets URL_SCHEME URL_USER URL_PASS URL_HOST
# URL_PORT URL_PATH URL_QUERY. Handles [v6]:port hosts and missing parts.
parse_url() {
	local url="$1" default_port="$2" rest hostport userinfo
	URL_SCHEME="${url%%://*}"
	rest="${url#*://}"
	URL_QUERY=""
	if [[ "$rest" == *\?* ]]; then
		URL_QUERY="${rest#*\?}"
		rest="${rest%%\?*}"
	fi
	URL_PATH=""
	if [[ "$rest" == */* ]]; then
		URL_PATH="${rest#*/}"
		rest="${rest%%/*}"
	fi
	hostport="$rest"
	userinfo=""
	if [[ "$rest" == *@* ]]; then
		userinfo="${rest%@*}"
		hostport="${rest##*@}"
	fi
	URL_USER="${userinfo%%:*}"
	URL_PASS=""
	[[ "$userinfo" == *:* ]] && URL_PASS="${userinfo#*:}"
	if [[ "$hostport" =~ ^\[([^]]*)\](:([0-9]+))?$ ]]; then
		URL_HOST="${BASH_REMATCH[1]}"
		URL_PORT="${BASH_REMATCH[3]}"
	elif [[ "$hostport" == *:* ]]; then
		URL_HOST="${hostport%%:*}"
		URL_PORT="${hostport##*:}"
	else
		URL_HOST="$hostport"
		URL_PORT=""
	fi
	[[ -n "$URL_HOST" ]] || URL_HOST="127.0.0.1"
	[[ -n "$URL_PORT" ]] || URL_PORT="$default_port"
	[[ "$URL_PORT" =~ ^[0-9]+$ ]] || die "bad port '$URL_PORT' in URL $url"
}

# Load PG_* and MQ_* from the configured URLs.
load_config() {
	parse_url "$FF_DATABASE_URL" 5432
	case "$URL_SCHEME" in postgres | postgresql) ;; *) die "FLOWFORGE_DATABASE_URL must be a postgres:// URL (got $FF_DATABASE_URL)" ;; esac
	PG_HOST="$URL_HOST" PG_PORT="$URL_PORT" PG_USER="${URL_USER:-postgres}" PG_PASS="$URL_PASS"
	PG_DB="${URL_PATH:-flowforge}"
	PG_QUERY="$URL_QUERY"
	# Same server, maintenance database "postgres": used to create $PG_DB and
	# handed to the Go tests as FLOWFORGE_TEST_DATABASE_URL.
	local auth="$PG_USER"
	[[ -n "$PG_PASS" ]] && auth="$PG_USER:$PG_PASS"
	local hostpart="$PG_HOST"
	[[ "$PG_HOST" == *:* ]] && hostpart="[$PG_HOST]"
	PG_ADMIN_URL="postgres://$auth@$hostpart:$PG_PORT/postgres"
	[[ -n "$PG_QUERY" ]] && PG_ADMIN_URL="$PG_ADMIN_URL?$PG_QUERY"

	parse_url "$FF_AMQP_URL" 5672
	case "$URL_SCHEME" in amqp | amqps) ;; *) die "FLOWFORGE_AMQP_URL must be an amqp:// URL (got $FF_AMQP_URL)" ;; esac
	MQ_HOST="$URL_HOST" MQ_PORT="$URL_PORT" MQ_USER="${URL_USER:-guest}" MQ_PASS="${URL_PASS:-guest}"
}

is_local_host() {
	case "$1" in 127.* | localhost | ::1 | 0.0.0.0) return 0 ;; *) return 1 ;; esac
}

# tcp_open HOST PORT: true when something accepts TCP connections.
tcp_open() {
	# shellcheck disable=SC2016 # $1/$2 expand in the inner bash
	timeout 3 bash -c 'exec 3<>"/dev/tcp/$1/$2"' _ "$1" "$2" 2>/dev/null
}

pg_answers() {
	local host="$1" port="$2"
	if command -v pg_isready >/dev/null 2>&1; then
		pg_isready -q -t 3 -h "$host" -p "$port" >/dev/null 2>&1
	else
		tcp_open "$host" "$port"
	fi
}

# amqp_answers HOST PORT: TCP probe plus the AMQP 0-9-1 protocol header; a
# broker answers with a Connection.Start method frame (first byte 0x01).
amqp_answers() {
	local host="$1" port="$2" first
	tcp_open "$host" "$port" || return 1
	# shellcheck disable=SC2016 # $1/$2 expand in the inner bash
	first="$(timeout 5 bash -c '
		exec 3<>"/dev/tcp/$1/$2" || exit 1
		printf "AMQP\000\000\011\001" >&3
		head -c 1 <&3 | od -An -tx1
	' _ "$host" "$port" 2>/dev/null | tr -d ' \n')" || true
	[[ "$first" == "01" ]]
}

# wait_until SECONDS DESCRIPTION CMD...: poll CMD once a second.
wait_until() {
	local secs="$1" what="$2" i
	shift 2
	for ((i = 0; i < secs; i++)); do
		"$@" && return 0
		sleep 1
	done
	"$@" && return 0
	warn "timed out after ${secs}s waiting for $what"
	return 1
}

# Directory of the newest installed PostgreSQL server binaries (Debian layout),
# or the directory of pg_ctl on PATH.
pg_bindir() {
	local d
	d="$(find /usr/lib/postgresql -maxdepth 2 -mindepth 2 -type d -name bin 2>/dev/null | sort -V | tail -n 1)"
	if [[ -n "$d" && -x "$d/pg_ctl" && -x "$d/initdb" ]]; then
		printf '%s\n' "$d"
	elif command -v pg_ctl >/dev/null 2>&1 && command -v initdb >/dev/null 2>&1; then
		dirname "$(command -v pg_ctl)"
	else
		return 1
	fi
}

# The package's own rabbitmq-server script (not the /usr/sbin wrapper, which
# switches to the system "rabbitmq" user and its fixed paths).
rabbitmq_server_bin() {
	local s
	s="$(dpkg -L rabbitmq-server 2>/dev/null | grep 'bin/rabbitmq-server$' | grep -v '^/usr/sbin/' | sort | head -n 1)" || true
	[[ -n "$s" && -x "$s" ]] || s=/usr/lib/rabbitmq/bin/rabbitmq-server
	[[ -x "$s" ]] || return 1
	printf '%s\n' "$s"
}

rabbitmqctl_bin() {
	local d
	d="$(dirname "$(rabbitmq_server_bin)")" || return 1
	if [[ -x "$d/rabbitmqctl" ]]; then printf '%s\n' "$d/rabbitmqctl"; else command -v rabbitmqctl; fi
}

# Run a command as the postgres OS user when we are root (initdb and the
# server refuse to run as root); as ourselves otherwise.
as_pg_user() {
	if [[ "$(id -u)" -eq 0 ]]; then
		runuser -u postgres -- "$@"
	else
		"$@"
	fi
}

pg_state_dir() { printf '%s/postgres-%s\n' "$FF_STATE_DIR" "$1"; }
mq_state_dir() { printf '%s/rabbitmq-%s\n' "$FF_STATE_DIR" "$1"; }

# Private-instance environment for the RabbitMQ node recorded in DIR.
mq_env() {
	local dir="$1" port="$2" dist_port="$3" node="$4"
	export HOME="$dir/home"
	export RABBITMQ_NODENAME="$node"
	export RABBITMQ_NODE_IP_ADDRESS=127.0.0.1
	export RABBITMQ_NODE_PORT="$port"
	export RABBITMQ_DIST_PORT="$dist_port"
	export RABBITMQ_MNESIA_BASE="$dir/mnesia"
	export RABBITMQ_LOG_BASE="$dir/log"
	export RABBITMQ_PID_FILE="$dir/rabbitmq.pid"
	export RABBITMQ_ENABLED_PLUGINS_FILE="$dir/enabled_plugins"
	export RABBITMQ_CONFIG_FILE="$dir/rabbitmq.conf"
	export RABBITMQ_ADVANCED_CONFIG_FILE="$dir/advanced.config"
	export RABBITMQ_CONF_ENV_FILE="$dir/rabbitmq-env.conf"
	export RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS="-kernel inet_dist_use_interface {127,0,0,1}"
	export ERL_EPMD_ADDRESS=127.0.0.1
}

# port_busy PORT: some local socket (listening or not: an outgoing connection's
# ephemeral source port counts too) already uses PORT, so a server cannot bind it.
port_busy() {
	command -v ss >/dev/null 2>&1 || return 1
	[[ -n "$(ss -Htan "sport = :$1" 2>/dev/null)" ]]
}

# explain_busy_port PORT: print who holds PORT and the usual cause.
explain_busy_port() {
	local lo hi
	ss -Htanp "sport = :$1" 2>/dev/null | sed 's/^/    /' >&2 || true
	if read -r lo hi </proc/sys/net/ipv4/ip_local_port_range 2>/dev/null && (($1 >= lo && $1 <= hi)); then
		printf '  port %s lies in the ephemeral range %s-%s, where outgoing connections pick their source ports;
  choose a port outside it (e.g. 15432 / 15673)
' "$1" "$lo" "$hi" >&2
	fi
}

pid_alive() { [[ -n "${1:-}" ]] && kill -0 "$1" 2>/dev/null; }

# A port nobody listens on, starting at $1.
free_port() {
	local p="$1"
	while tcp_open 127.0.0.1 "$p" || port_busy "$p"; do p=$((p + 1)); done
	printf '%s\n' "$p"
}

# pg_auth_refused ERR: true when psql's error ERR is a refused login (a
# password asked for or wrong, no pg_hba.conf entry), which no wait fixes.
pg_auth_refused() {
	case "$1" in
	*"no password supplied"* | *"password authentication failed"* | *"no pg_hba.conf entry"* | *"Peer authentication failed"* | *"Ident authentication failed"*) return 0 ;;
	*) return 1 ;;
	esac
}

# pg_explain_auth ERR INSTALLED_NOW: print why the server on
# $PG_HOST:$PG_PORT refused the login and exactly what to do. Typical cause:
# Debian's postgresql package starts its own cluster on 5432 (under systemd
# right at install), and it asks for a password over TCP (scram-sha-256).
# scripts/up does not change that cluster's pg_hba.conf: it is the
# machine's, not FlowForge's (it starts at boot and may hold other data, and
# trust on 127.0.0.1 would give every local user superuser access to it).
pg_explain_auth() {
	local err="$1" installed_now="$2" why
	if [[ "$installed_now" == 1 ]]; then
		why="scripts/up installed the postgresql package just now, and the package started its own system cluster on $PG_PORT (Debian does so under systemd); that cluster asks for a password over TCP"
	else
		why="this server is not one scripts/up started, and it asks for a password over TCP (Debian's own cluster does: scram-sha-256 for 127.0.0.1)"
	fi
	{
		printf 'error: postgres: %s:%s refuses user %s:\n' "$PG_HOST" "$PG_PORT" "$PG_USER"
		printf '%s\n' "$err" | sed 's/^/    /'
		if [[ -n "$PG_PASS" ]]; then
			printf '  The password in FLOWFORGE_DATABASE_URL is refused. Put the right one in the URL, or set it on the server:\n'
			printf "    sudo -u postgres psql -c \"ALTER ROLE %s PASSWORD '...'\"\n" "$PG_USER"
			return
		fi
		printf '  %s.\n' "$why"
		printf '  Either (1) let scripts/up run a private FlowForge instance (trust auth, data under %s) on another port, say 15432:\n' "$FF_STATE_DIR"
		printf "    export FLOWFORGE_DATABASE_URL='postgres://postgres@127.0.0.1:15432/%s?sslmode=disable'\n" "$PG_DB"
		printf '    scripts/up    # then make demo / make test from the same shell\n'
		printf '  or (2) give the role a password and put it in the URL:\n'
		printf "    sudo -u postgres psql -c \"ALTER ROLE %s PASSWORD 'choose-one'\"\n" "$PG_USER"
		printf "    export FLOWFORGE_DATABASE_URL='postgres://%s:choose-one@%s:%s/%s?sslmode=disable'\n" "$PG_USER" "$PG_HOST" "$PG_PORT" "$PG_DB"
		printf '    scripts/up\n'
	} >&2
}
