#!/usr/bin/env bash
# Local single-node Apache Kafka (KRaft, broker+controller) for tests and development.
#
#   scripts/kafka.sh start                        # fetch jars (once), format, start, wait until ready
#   scripts/kafka.sh status                       # exit 0 when running, 1 when not
#   scripts/kafka.sh topic-create NAME [PARTITIONS] [extra kafka-topics args, e.g. --config cleanup.policy=compact]
#   scripts/kafka.sh stop                         # SIGTERM, wait, SIGKILL; removes the data dir
#
# No Kafka distribution is downloaded: the jars come from Maven Central through
# scripts/kafka/pom.xml into ${KAUSALITY_CACHE:-$HOME/.cache/kausality-stream}/kafka/libs.
# Listens on 127.0.0.1 only. See scripts/kafka/README.md.
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
POM="$SCRIPT_DIR/kafka/pom.xml"

CACHE_DIR="${KAUSALITY_CACHE:-$HOME/.cache/kausality-stream}/kafka"
LIBS_DIR="$CACHE_DIR/libs"
STATE_DIR="${KAFKA_STATE_DIR:-/tmp/kausality-kafka}"
DATA_DIR="$STATE_DIR/data"
PID_FILE="$STATE_DIR/kafka.pid"
LOG_FILE="$STATE_DIR/kafka.log"
PROPS_FILE="$STATE_DIR/server.properties"
LOG4J_FILE="$STATE_DIR/log4j2.properties"
TOOLS_LOG4J_FILE="$STATE_DIR/tools-log4j2.properties"

HOST=127.0.0.1
PORT="${KAFKA_PORT:-19092}"
CONTROLLER_PORT="${KAFKA_CONTROLLER_PORT:-19093}"
START_TIMEOUT="${KAFKA_START_TIMEOUT:-60}"
STOP_TIMEOUT="${KAFKA_STOP_TIMEOUT:-30}"
HEAP_OPTS="${KAFKA_HEAP_OPTS:--Xmx512m -Xms256m}"
LOG_LEVEL="${KAFKA_LOG_LEVEL:-INFO}"

log() { echo "kafka.sh: $*" >&2; }
die() { log "error: $*"; exit 1; }

usage() {
  cat >&2 <<EOF
usage: $0 start|stop|status|topic-create NAME [PARTITIONS] [extra kafka-topics args...]
env: KAFKA_PORT=$PORT KAFKA_CONTROLLER_PORT=$CONTROLLER_PORT KAFKA_STATE_DIR=$STATE_DIR
     KAUSALITY_CACHE (jars in $LIBS_DIR) KAFKA_START_TIMEOUT=$START_TIMEOUT
     KAFKA_STOP_TIMEOUT=$STOP_TIMEOUT KAFKA_HEAP_OPTS='$HEAP_OPTS' KAFKA_LOG_LEVEL=$LOG_LEVEL
EOF
  exit 2
}

# ---------------------------------------------------------------- tools

apt_install() {
  local sudo=()
  if [[ $(id -u) -ne 0 ]]; then
    command -v sudo >/dev/null 2>&1 || { log "not root and no sudo: cannot apt-get install $*"; return 1; }
    sudo=(sudo -n)
  fi
  command -v apt-get >/dev/null 2>&1 || { log "no apt-get: install $* by hand"; return 1; }
  log "installing $* with apt-get"
  if ! DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -q "$@" >/dev/null 2>&1; then
    DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get update -q >/dev/null 2>&1 || true
    DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -q "$@" >/dev/null
  fi
}

java_major() {
  java -version 2>&1 | sed -n 's/.*version "\([0-9]*\)[."].*/\1/p' | head -n1
}

ensure_java() {
  if ! command -v java >/dev/null 2>&1 || [[ "$(java_major)" -lt 17 ]]; then
    apt_install openjdk-17-jre-headless || die "Java 17+ is required"
  fi
}

ensure_mvn() {
  command -v mvn >/dev/null 2>&1 || apt_install maven || die "maven is required to fetch the Kafka jars"
}

# kcat is used by benchmarks/tests and for the readiness probe; start falls back to the
# Java admin tools when it cannot be installed.
ensure_kcat() {
  command -v kcat >/dev/null 2>&1 && return 0
  apt_install kcat || log "warning: kcat could not be installed"
}

# ---------------------------------------------------------------- jars

pom_hash() { sha256sum "$POM" | cut -d' ' -f1; }

ensure_libs() {
  local want stamp tmp
  want="$(pom_hash)"
  stamp="$LIBS_DIR/.pom.sha256"
  if [[ -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
    return 0
  fi
  ensure_mvn
  mkdir -p "$CACHE_DIR"
  exec 9>"$CACHE_DIR/.lock"
  flock 9
  # another process may have finished the download while we waited for the lock
  if [[ -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
    exec 9>&-
    return 0
  fi
  log "fetching Kafka jars from Maven Central into $LIBS_DIR"
  tmp="$CACHE_DIR/libs.tmp.$$"
  rm -rf "$tmp"
  mkdir -p "$tmp"
  if ! mvn -q -B -Dstyle.color=never -f "$POM" dependency:copy-dependencies \
    -DoutputDirectory="$tmp" >"$CACHE_DIR/mvn.log" 2>&1; then
    cat "$CACHE_DIR/mvn.log" >&2
    rm -rf "$tmp"
    die "mvn dependency:copy-dependencies failed"
  fi
  echo "$want" >"$tmp/.pom.sha256"
  rm -rf "$LIBS_DIR"
  mv "$tmp" "$LIBS_DIR"
  exec 9>&-
}

# java -cp with the cached jars; tool processes get a small heap and quiet logging
tool_java() {
  write_log4j
  TOOL_JAVA=(java -Xmx256m -XX:TieredStopAtLevel=1 -Djava.awt.headless=true
    "-Dlog4j2.configurationFile=$TOOLS_LOG4J_FILE" -cp "$LIBS_DIR/*")
}

run_tool() {
  tool_java
  "${TOOL_JAVA[@]}" "$@"
}

# ---------------------------------------------------------------- process state

read_pid() {
  if [[ -f "$PID_FILE" ]]; then cat "$PID_FILE" 2>/dev/null || true; fi
}

# the pid in the pid file is alive and is our broker (guards against pid reuse)
is_running() {
  local pid
  pid="$(read_pid)"
  [[ -n "$pid" ]] || return 1
  kill -0 "$pid" 2>/dev/null || return 1
  local cmdline
  cmdline="$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null || true)"
  [[ "$cmdline" == *" kafka.Kafka "* ]]
}

port_open() { (exec 3<>"/dev/tcp/$HOST/$1") 2>/dev/null; }

# the broker answers a metadata request and lists itself
metadata_ok() {
  if command -v kcat >/dev/null 2>&1; then
    local md
    md="$(kcat -L -b "$HOST:$PORT" -m 3 2>/dev/null || true)"
    [[ "$md" == *"broker 1 at $HOST:$PORT"* ]]
  else
    tool_java
    timeout 30 "${TOOL_JAVA[@]}" org.apache.kafka.tools.TopicCommand \
      --bootstrap-server "$HOST:$PORT" --list >/dev/null 2>&1
  fi
}

# ---------------------------------------------------------------- config

write_log4j() {
  mkdir -p "$STATE_DIR"
  cat >"$LOG4J_FILE" <<EOF
status = warn
appender.out.type = Console
appender.out.name = STDOUT
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = $LOG_LEVEL
rootLogger.appenderRef.out.ref = STDOUT
EOF
  cat >"$TOOLS_LOG4J_FILE" <<EOF
status = warn
appender.err.type = Console
appender.err.name = STDERR
appender.err.target = SYSTEM_ERR
appender.err.layout.type = PatternLayout
appender.err.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = WARN
rootLogger.appenderRef.err.ref = STDERR
EOF
}

write_props() {
  cat >"$PROPS_FILE" <<EOF
# generated by scripts/kafka.sh: single-node KRaft (combined broker + controller), loopback only
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@$HOST:$CONTROLLER_PORT
listeners=PLAINTEXT://$HOST:$PORT,CONTROLLER://$HOST:$CONTROLLER_PORT
advertised.listeners=PLAINTEXT://$HOST:$PORT
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT
log.dirs=$DATA_DIR

# single replica everywhere
default.replication.factor=1
min.insync.replicas=1
offsets.topic.replication.factor=1
offsets.topic.num.partitions=8
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
transaction.state.log.num.partitions=4
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
num.partitions=1
auto.create.topics.enable=true
delete.topic.enable=true
group.initial.rebalance.delay.ms=0

# small machine (2 cores): few threads, small segments and indexes
num.network.threads=2
num.io.threads=2
background.threads=2
num.recovery.threads.per.data.dir=1
log.segment.bytes=16777216
log.index.size.max.bytes=1048576
log.retention.hours=2
log.retention.check.interval.ms=60000
EOF
}

new_cluster_id() {
  # Kafka cluster ids are 16 random bytes in URL-safe base64 without padding
  head -c 16 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=\n'
}

# ---------------------------------------------------------------- commands

cmd_start() {
  if is_running; then
    echo "kafka already running (pid $(read_pid)) on $HOST:$PORT"
    return 0
  fi
  ensure_java
  ensure_kcat
  ensure_libs

  if port_open "$PORT" || port_open "$CONTROLLER_PORT"; then
    die "port $PORT or $CONTROLLER_PORT on $HOST is already in use by another process"
  fi

  mkdir -p "$STATE_DIR"
  rm -f "$PID_FILE"
  rm -rf "$DATA_DIR"
  write_log4j
  write_props
  : >"$LOG_FILE"

  # --opt=value form: a random id may start with '-'
  run_tool kafka.tools.StorageTool format --ignore-formatted \
    --cluster-id="$(new_cluster_id)" --config="$PROPS_FILE" >>"$LOG_FILE" 2>&1 ||
    { tail -n 50 "$LOG_FILE" >&2; die "formatting KRaft storage failed"; }

  # own session so that the caller's Ctrl-C / process-group kill does not hit the broker;
  # the pid file holds the pid of the java process itself (bash execs java)
  # shellcheck disable=SC2086,SC2016
  setsid bash -c 'echo $$ >"$0"; exec "$@"' "$PID_FILE" \
    java $HEAP_OPTS -XX:+UseG1GC -XX:MaxGCPauseMillis=20 -Djava.awt.headless=true \
    -Dlog4j2.configurationFile="$LOG4J_FILE" -Dkafka.logs.dir="$STATE_DIR" \
    -cp "$LIBS_DIR/*" kafka.Kafka "$PROPS_FILE" \
    </dev/null >>"$LOG_FILE" 2>&1 &

  local deadline=$((SECONDS + START_TIMEOUT)) pid=""
  while ((SECONDS < deadline)); do
    pid="$(read_pid)"
    if [[ -n "$pid" ]] && ! kill -0 "$pid" 2>/dev/null; then
      tail -n 50 "$LOG_FILE" >&2
      rm -f "$PID_FILE"
      die "kafka exited during startup (log: $LOG_FILE)"
    fi
    if [[ -n "$pid" ]] && port_open "$PORT" && metadata_ok; then
      echo "kafka ready on $HOST:$PORT"
      return 0
    fi
    sleep 0.5
  done
  tail -n 50 "$LOG_FILE" >&2
  log "kafka did not become ready within ${START_TIMEOUT}s; stopping it"
  stop_process
  die "kafka failed to start (log: $LOG_FILE)"
}

stop_process() {
  local pid
  pid="$(read_pid)"
  if [[ -n "$pid" ]] && is_running; then
    kill -TERM "$pid" 2>/dev/null || true
    local deadline=$((SECONDS + STOP_TIMEOUT))
    while kill -0 "$pid" 2>/dev/null && ((SECONDS < deadline)); do
      sleep 0.2
    done
    if kill -0 "$pid" 2>/dev/null; then
      log "kafka (pid $pid) did not stop within ${STOP_TIMEOUT}s; sending SIGKILL"
      kill -KILL "$pid" 2>/dev/null || true
      while kill -0 "$pid" 2>/dev/null; do sleep 0.1; done
    fi
    echo "kafka stopped (pid $pid)"
  else
    echo "kafka not running"
  fi
  rm -f "$PID_FILE"
}

cmd_stop() {
  stop_process
  rm -rf "$DATA_DIR"
}

cmd_status() {
  if is_running; then
    echo "kafka running (pid $(read_pid)) on $HOST:$PORT, state $STATE_DIR"
    return 0
  fi
  echo "kafka not running"
  return 1
}

cmd_topic_create() {
  [[ $# -ge 1 ]] || usage
  local name="$1" partitions="${2:-1}"
  shift $(($# >= 2 ? 2 : 1))
  [[ "$partitions" =~ ^[0-9]+$ ]] || die "PARTITIONS must be a number, got '$partitions'"
  is_running || die "kafka is not running (run: $0 start)"
  ensure_libs
  run_tool org.apache.kafka.tools.TopicCommand --bootstrap-server "$HOST:$PORT" \
    --create --if-not-exists --topic "$name" --partitions "$partitions" \
    --replication-factor 1 "$@"
  echo "topic $name ready ($partitions partitions)"
}

main() {
  [[ $# -ge 1 ]] || usage
  local cmd="$1"
  shift
  case "$cmd" in
    start) cmd_start ;;
    stop) cmd_stop ;;
    status) cmd_status ;;
    topic-create) cmd_topic_create "$@" ;;
    -h | --help | help) usage ;;
    *) usage ;;
  esac
}

main "$@"
