#!/usr/bin/env bash
# Local single-node Apache Kafka 4.x (KRaft combined mode: broker + controller in one JVM) for
# memstream development and CI. Binds 127.0.0.1 only.
#
#   infra/kafka-local.sh start            start (or confirm already running), wait until ready
#   infra/kafka-local.sh stop [--purge]   stop by PID (TERM, then KILL); --purge deletes the data
#   infra/kafka-local.sh status           report; exit 0 running and answering, 1 running but not
#                                         answering, 3 stopped
#   infra/kafka-local.sh restart | logs [N] | env
#   infra/kafka-local.sh kill             SIGKILL the broker (a crash), keeping its data: `start`
#                                         brings it back on the same data
#   infra/kafka-local.sh pause | resume   SIGSTOP / SIGCONT the broker (a frozen process: its
#                                         connections stay open and nothing answers)
#   infra/kafka-local.sh pid              print the broker's PID (exit 3 when it is not running)
#
# kill, pause and resume are for fault tests (tests/kafka/test_kafka_broker_faults.py runs them
# against a broker of its own, on other ports and another data directory).
#
# Environment (all optional):
#   KAFKA_PORT                     client port (default 9092)
#   KAFKA_CONTROLLER_PORT          KRaft controller port (default KAFKA_PORT + 1)
#   KAFKA_HOME                     use $KAFKA_HOME/libs (an unpacked Kafka distribution) instead
#                                  of downloading the jars from Maven Central
#   MEMSTREAM_KAFKA_VERSION        org.apache.kafka:kafka_2.13 version to fetch (default 4.4.0)
#   MEMSTREAM_KAFKA_CACHE          jar cache (default $HOME/.cache/memstream/kafka)
#   MEMSTREAM_KAFKA_DATA           data/log/pid directory (default /tmp/memstream-kafka-$KAFKA_PORT)
#   MEMSTREAM_KAFKA_CLUSTER_ID     cluster id used when formatting (default: a random one)
#   MEMSTREAM_KAFKA_START_TIMEOUT  seconds to wait for readiness (default 120)
#   MEMSTREAM_KAFKA_STOP_TIMEOUT   seconds between TERM and KILL (default 30)
#   KAFKA_HEAP_OPTS                heap flags (default "-Xms256m -Xmx512m")
#   KAFKA_JVM_OPTS                 extra JVM flags
#   JAVA_HOME                      Java 17+ to use (default: java on PATH)
set -Eeuo pipefail

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
KAFKA_CONF_DIR=$SCRIPT_DIR/kafka

KAFKA_VERSION=${MEMSTREAM_KAFKA_VERSION:-4.4.0}
PORT=${KAFKA_PORT:-9092}
CONTROLLER_PORT=${KAFKA_CONTROLLER_PORT:-$((PORT + 1))}
NODE_ID=1
CACHE_ROOT=${MEMSTREAM_KAFKA_CACHE:-${HOME:-/root}/.cache/memstream/kafka}
DATA_DIR=${MEMSTREAM_KAFKA_DATA:-/tmp/memstream-kafka-$PORT}
START_TIMEOUT=${MEMSTREAM_KAFKA_START_TIMEOUT:-120}
STOP_TIMEOUT=${MEMSTREAM_KAFKA_STOP_TIMEOUT:-30}
HEAP_OPTS=${KAFKA_HEAP_OPTS:--Xms256m -Xmx512m}
JVM_OPTS=${KAFKA_JVM_OPTS:-}
BOOTSTRAP=127.0.0.1:$PORT

PID_FILE=$DATA_DIR/kafka.pid
LOG_FILE=$DATA_DIR/broker.log
PROPS_FILE=$DATA_DIR/server.properties
LOG_DIRS=$DATA_DIR/kraft-logs
MARKER=$DATA_DIR/.memstream-kafka

LIB_DIR=""
JAVA=""

say() { printf 'kafka-local: %s\n' "$*"; }
err() { printf 'kafka-local: %s\n' "$*" >&2; }
die() { err "error: $*"; exit 1; }

now_s() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$(now_s)" 'BEGIN { printf "%.1f", b - a }'; }

usage() {
    sed -n '2,/^set -Eeuo/p' "${BASH_SOURCE[0]}" | sed '$d' | sed 's/^# \{0,1\}//'
}

validate_ports() {
    if ! [[ $PORT =~ ^[0-9]+$ ]] || ((PORT < 1 || PORT > 65535)); then
        die "KAFKA_PORT='$PORT' is not a port"
    fi
    if ! [[ $CONTROLLER_PORT =~ ^[0-9]+$ ]] || ((CONTROLLER_PORT < 1 || CONTROLLER_PORT > 65535)); then
        die "KAFKA_CONTROLLER_PORT='$CONTROLLER_PORT' is not a port"
    fi
    ((PORT != CONTROLLER_PORT)) || die "KAFKA_PORT and KAFKA_CONTROLLER_PORT must differ ($PORT)"
}

find_java() {
    if [[ -n ${JAVA_HOME:-} && -x $JAVA_HOME/bin/java ]]; then
        JAVA=$JAVA_HOME/bin/java
    else
        JAVA=$(command -v java) || die "java not found (Kafka 4.x needs Java 17+; set JAVA_HOME)"
    fi
    local v major
    v=$("$JAVA" -version 2>&1 | awk -F'"' '/version/ { print $2; exit }')
    major=${v%%.*}
    [[ $major == 1 ]] && major=$(echo "$v" | cut -d. -f2)
    if ! [[ $major =~ ^[0-9]+$ ]] || ((major < 17)); then
        die "$JAVA is Java '$v'; Kafka 4.x needs Java 17+ (set JAVA_HOME)"
    fi
}

# Sets LIB_DIR to a directory holding the broker jars, downloading them on first use.
ensure_libs() {
    if [[ -n ${KAFKA_HOME:-} ]]; then
        LIB_DIR=$KAFKA_HOME/libs
        compgen -G "$LIB_DIR/kafka_2.13-*.jar" >/dev/null ||
            die "KAFKA_HOME=$KAFKA_HOME has no libs/kafka_2.13-*.jar"
        local jar
        jar=$(compgen -G "$LIB_DIR/kafka_2.13-*.jar" | grep -v -E -- '-(sources|javadoc|test)\.jar$' | head -1)
        KAFKA_VERSION=$(basename "$jar" .jar)
        KAFKA_VERSION=${KAFKA_VERSION#kafka_2.13-}
        return
    fi
    LIB_DIR=$CACHE_ROOT/$KAFKA_VERSION/libs
    [[ -f $LIB_DIR/.complete ]] && return

    command -v mvn >/dev/null || die "mvn not found: install Maven, or set KAFKA_HOME to a Kafka distribution"
    mkdir -p "$CACHE_ROOT"
    # One download at a time per cache (two starts on different ports may race here).
    exec 8>"$CACHE_ROOT/.download.lock"
    flock -w 600 8 || die "timed out waiting for another download into $CACHE_ROOT"
    if [[ ! -f $LIB_DIR/.complete ]]; then
        local t0 tmp mvn_log
        t0=$(now_s)
        say "fetching org.apache.kafka:kafka_2.13:$KAFKA_VERSION and its runtime dependencies from Maven Central"
        tmp=$(mktemp -d "$CACHE_ROOT/.download.XXXXXX")
        mvn_log=$tmp.mvn.log
        if ! mvn -B -q -f "$KAFKA_CONF_DIR/pom.xml" dependency:copy-dependencies \
            -Dkafka.version="$KAFKA_VERSION" -DoutputDirectory="$tmp" >"$mvn_log" 2>&1; then
            tail -n 40 "$mvn_log" >&2
            rm -rf "$tmp" "$mvn_log"
            die "mvn could not fetch Kafka $KAFKA_VERSION (see above)"
        fi
        [[ -f $tmp/kafka_2.13-$KAFKA_VERSION.jar ]] || { rm -rf "$tmp" "$mvn_log"; die "download lacks kafka_2.13-$KAFKA_VERSION.jar"; }
        touch "$tmp/.complete"
        rm -rf "$LIB_DIR" "$mvn_log"
        mkdir -p "$(dirname "$LIB_DIR")"
        mv "$tmp" "$LIB_DIR"
        say "cached $(find "$LIB_DIR" -name '*.jar' | wc -l) jars in $LIB_DIR ($(elapsed "$t0") s)"
    fi
    flock -u 8
}

# Compiles the readiness probe once per probe source (javac), else runs it from source.
PROBE_CP=""
PROBE_MAIN=""
ensure_probe() {
    local src=$KAFKA_CONF_DIR/KafkaReady.java sum dir
    sum=$(sha1sum "$src" | cut -c1-12)
    dir=$CACHE_ROOT/probe-$sum
    if [[ ! -f $dir/KafkaReady.class ]] && command -v javac >/dev/null; then
        local javac_bin=javac
        [[ -n ${JAVA_HOME:-} && -x $JAVA_HOME/bin/javac ]] && javac_bin=$JAVA_HOME/bin/javac
        mkdir -p "$CACHE_ROOT"
        local tmp
        tmp=$(mktemp -d "$CACHE_ROOT/.probe.XXXXXX")
        if "$javac_bin" -nowarn --release 17 -cp "$LIB_DIR/*" -d "$tmp" "$src" >/dev/null 2>&1; then
            rm -rf "$dir" && mv "$tmp" "$dir"
        else
            rm -rf "$tmp"
        fi
    fi
    if [[ -f $dir/KafkaReady.class ]]; then
        PROBE_CP="$LIB_DIR/*:$dir"
        PROBE_MAIN=KafkaReady
    else
        PROBE_CP="$LIB_DIR/*"
        PROBE_MAIN=$src   # Java's single-file source launcher
    fi
}

# probe TIMEOUT_SECONDS: 0 when the broker answers metadata within the timeout.
probe() {
    local ms
    ms=$(awk -v s="$1" 'BEGIN { printf "%d", (s < 1 ? 1 : s) * 1000 }')
    "$JAVA" -Xmx128m -XX:TieredStopAtLevel=1 -XX:+UseSerialGC \
        -Dlog4j2.configurationFile="$KAFKA_CONF_DIR/log4j2.xml" -Dmemstream.kafka.loglevel=ERROR \
        -cp "$PROBE_CP" "$PROBE_MAIN" "$BOOTSTRAP" "$ms"
}

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# Prints the PID of our broker if it is alive, else nothing (and returns 1).
running_pid() {
    [[ -f $PID_FILE ]] || return 1
    local pid
    pid=$(tr -dc '0-9' <"$PID_FILE")
    [[ -n $pid ]] || return 1
    kill -0 "$pid" 2>/dev/null || return 1
    # Guard against PID reuse: it must be a kafka.Kafka JVM running our properties file.
    tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q -F -- "kafka.Kafka $PROPS_FILE" || return 1
    echo "$pid"
}

log_tail() {
    if [[ -f $LOG_FILE ]]; then
        err "---- last 40 lines of $LOG_FILE ----"
        tail -n 40 "$LOG_FILE" >&2
        err "---- end of log ----"
    else
        err "(no log file at $LOG_FILE)"
    fi
}

render_properties() {
    sed -e "s|@NODE_ID@|$NODE_ID|g" \
        -e "s|@PORT@|$PORT|g" \
        -e "s|@CONTROLLER_PORT@|$CONTROLLER_PORT|g" \
        -e "s|@LOG_DIRS@|$LOG_DIRS|g" \
        "$KAFKA_CONF_DIR/server.properties.template" >"$PROPS_FILE.tmp"
    if grep -v '^[[:space:]]*#' "$PROPS_FILE.tmp" | grep -q '@[A-Z_]*@'; then
        die "unsubstituted placeholder in $PROPS_FILE.tmp"
    fi
    mv "$PROPS_FILE.tmp" "$PROPS_FILE"
}

format_storage() {
    [[ -f $LOG_DIRS/meta.properties ]] && return
    local cluster_id=${MEMSTREAM_KAFKA_CLUSTER_ID:-}
    if [[ -z $cluster_id ]]; then
        # What `kafka-storage random-uuid` prints (16 random bytes, URL-safe base64, no padding,
        # not starting with '-'), without paying for another JVM start.
        until [[ $cluster_id =~ ^[A-Za-z0-9_][A-Za-z0-9_-]{21}$ ]]; do
            cluster_id=$(head -c 16 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=\n')
        done
    fi
    [[ $cluster_id =~ ^[A-Za-z0-9_-]{22}$ ]] || die "MEMSTREAM_KAFKA_CLUSTER_ID='$cluster_id' is not a 22-character Kafka cluster id"
    say "formatting $LOG_DIRS (cluster id $cluster_id)"
    if ! "$JAVA" -Xmx128m -cp "$LIB_DIR/*" -Dlog4j2.configurationFile="$KAFKA_CONF_DIR/log4j2.xml" \
        -Dmemstream.kafka.loglevel=WARN kafka.tools.StorageTool format \
        --cluster-id "$cluster_id" --config "$PROPS_FILE" --ignore-formatted >>"$LOG_FILE" 2>&1; then
        log_tail
        die "formatting the storage directory failed"
    fi
}

cmd_start() {
    validate_ports
    local t0
    t0=$(now_s)
    mkdir -p "$DATA_DIR"
    touch "$MARKER"
    # Serialise concurrent start/stop on the same data directory.
    exec 9>"$DATA_DIR/.lock"
    flock -w "$START_TIMEOUT" 9 || die "another kafka-local.sh holds $DATA_DIR/.lock"

    find_java
    ensure_libs
    ensure_probe

    local pid started_here=0
    if pid=$(running_pid); then
        say "already running (pid $pid), checking it answers at $BOOTSTRAP"
    else
        if [[ -f $PID_FILE ]]; then
            say "removing stale pid file $PID_FILE"
            rm -f "$PID_FILE"
        fi
        local p
        for p in "$PORT" "$CONTROLLER_PORT"; do
            if port_open "$p"; then
                die "port 127.0.0.1:$p is already in use by another process (not this script's broker with data dir $DATA_DIR); choose KAFKA_PORT / KAFKA_CONTROLLER_PORT or stop it"
            fi
        done
        render_properties
        format_storage

        say "starting Kafka $KAFKA_VERSION at $BOOTSTRAP (controller 127.0.0.1:$CONTROLLER_PORT), log $LOG_FILE"
        printf '\n==== %s kafka-local.sh start (Kafka %s) ====\n' "$(date -Is)" "$KAFKA_VERSION" >>"$LOG_FILE"
        local -a jvm_cmd
        # shellcheck disable=SC2206  # heap and JVM options are deliberately word-split
        jvm_cmd=("$JAVA" $HEAP_OPTS -XX:+UseG1GC -XX:MaxGCPauseMillis=20 -XX:InitiatingHeapOccupancyPercent=35
            -XX:+ExplicitGCInvokesConcurrent -XX:+ExitOnOutOfMemoryError -Djava.awt.headless=true
            -Dlog4j2.configurationFile="$KAFKA_CONF_DIR/log4j2.xml" -Dkafka.logs.dir="$DATA_DIR"
            $JVM_OPTS -cp "$LIB_DIR/*" kafka.Kafka "$PROPS_FILE")
        local -a detach=()
        command -v setsid >/dev/null && detach=(setsid)
        # The inner shell writes its own PID, then execs the JVM, so the PID file names the JVM.
        # The lock descriptors are closed so the long-lived JVM does not keep holding the locks.
        # shellcheck disable=SC2016  # $$ and $1 belong to the inner shell
        (cd "$DATA_DIR" && exec "${detach[@]}" nohup bash -c 'echo $$ >"$1"; shift; exec "$@"' \
            kafka-local "$PID_FILE" "${jvm_cmd[@]}" >>"$LOG_FILE" 2>&1 </dev/null) 8>&- 9>&- &
        started_here=1
        # Wait for the PID file the inner shell writes.
        local deadline_pid=$((SECONDS + 10))
        until [[ -s $PID_FILE ]]; do
            ((SECONDS < deadline_pid)) || { log_tail; die "the broker process did not start"; }
            sleep 0.05
        done
        pid=$(tr -dc '0-9' <"$PID_FILE")
    fi

    # 1) the client port accepts connections, while the process stays alive
    local deadline=$((SECONDS + START_TIMEOUT))
    until port_open "$PORT"; do
        if ! kill -0 "$pid" 2>/dev/null; then
            rm -f "$PID_FILE"
            log_tail
            die "the broker (pid $pid) exited during startup"
        fi
        if ((SECONDS >= deadline)); then
            abort_start "$started_here" "$pid" "port $PORT did not open within ${START_TIMEOUT}s"
        fi
        sleep 0.2
    done
    # 2) it answers metadata (DescribeCluster names a broker and a controller; topics list)
    local remaining=$((deadline - SECONDS)) answer
    ((remaining < 5)) && remaining=5
    if ! answer=$(probe "$remaining" 2>&1); then
        err "$answer"
        abort_start "$started_here" "$pid" "the broker did not answer metadata within ${START_TIMEOUT}s"
    fi
    say "${answer##*$'\n'}"
    say "Kafka $KAFKA_VERSION up at $BOOTSTRAP (pid $pid) after $(elapsed "$t0") s; data $DATA_DIR"
}

# abort_start STARTED_HERE PID MESSAGE: stop a broker this call started, show the log, fail.
abort_start() {
    if (($1)); then
        err "stopping the broker this start launched (pid $2)"
        stop_pid "$2"
        rm -f "$PID_FILE"
    fi
    log_tail
    die "$3"
}

# stop_pid PID: TERM, wait up to STOP_TIMEOUT, then KILL. Returns when the process is gone.
stop_pid() {
    local pid=$1 deadline
    kill -TERM "$pid" 2>/dev/null || return 0
    kill -CONT "$pid" 2>/dev/null || true   # a paused broker handles the TERM only once resumed
    deadline=$((SECONDS + STOP_TIMEOUT))
    while kill -0 "$pid" 2>/dev/null; do
        if ((SECONDS >= deadline)); then
            err "pid $pid still alive ${STOP_TIMEOUT}s after SIGTERM: sending SIGKILL"
            kill -KILL "$pid" 2>/dev/null || true
            local kdeadline=$((SECONDS + 10))
            while kill -0 "$pid" 2>/dev/null && ((SECONDS < kdeadline)); do sleep 0.1; done
            break
        fi
        sleep 0.1
    done
}

cmd_stop() {
    local purge=0 arg
    for arg in "$@"; do
        case $arg in
            --purge) purge=1 ;;
            *) die "stop: unknown option '$arg'" ;;
        esac
    done
    local t0 pid
    t0=$(now_s)
    if [[ -d $DATA_DIR ]]; then
        exec 9>"$DATA_DIR/.lock"
        flock -w "$((STOP_TIMEOUT + 30))" 9 || err "warning: could not take $DATA_DIR/.lock; stopping anyway"
    fi
    if pid=$(running_pid); then
        say "stopping Kafka (pid $pid)"
        stop_pid "$pid"
        if kill -0 "$pid" 2>/dev/null; then
            die "pid $pid survived SIGKILL"
        fi
        say "stopped after $(elapsed "$t0") s"
    else
        say "not running (data dir $DATA_DIR)"
    fi
    rm -f "$PID_FILE"
    if ((purge)) && [[ -d $DATA_DIR ]]; then
        # Only ever delete a directory this script created.
        if [[ -f $MARKER && $DATA_DIR != / && $DATA_DIR != "${HOME:-/root}" ]]; then
            rm -rf "$DATA_DIR"
            say "purged $DATA_DIR"
        else
            err "warning: not purging $DATA_DIR: it was not created by kafka-local.sh"
        fi
    fi
}

cmd_status() {
    validate_ports
    local pid
    if pid=$(running_pid); then
        find_java
        ensure_libs
        ensure_probe
        local answer
        if answer=$(probe 10 2>&1); then
            say "running: Kafka $KAFKA_VERSION, pid $pid, bootstrap $BOOTSTRAP, controller 127.0.0.1:$CONTROLLER_PORT"
            say "${answer##*$'\n'}"
            say "data $DATA_DIR, log $LOG_FILE"
            return 0
        fi
        say "running (pid $pid) but NOT answering at $BOOTSTRAP: ${answer##*$'\n'}"
        say "log $LOG_FILE"
        return 1
    fi
    if [[ -f $PID_FILE ]]; then
        say "stopped (stale pid file $PID_FILE)"
    else
        say "stopped (no broker for data dir $DATA_DIR)"
    fi
    if port_open "$PORT"; then
        say "note: something else listens on 127.0.0.1:$PORT"
    fi
    return 3
}

# signal_broker SIGNAL VERB: send SIGNAL to the running broker; exit 3 when none runs.
signal_broker() {
    local pid
    pid=$(running_pid) || { say "not running (data dir $DATA_DIR)"; exit 3; }
    kill "-$1" "$pid"
    say "$2 Kafka (pid $pid)"
}

cmd_kill() {
    local pid
    pid=$(running_pid) || { say "not running (data dir $DATA_DIR)"; exit 3; }
    kill -KILL "$pid"
    local deadline=$((SECONDS + 10))
    while kill -0 "$pid" 2>/dev/null; do
        ((SECONDS < deadline)) || die "pid $pid survived SIGKILL"
        sleep 0.05
    done
    say "killed Kafka (pid $pid) with SIGKILL; data kept in $DATA_DIR"
}

cmd_pid() {
    local pid
    pid=$(running_pid) || exit 3
    echo "$pid"
}

main() {
    local cmd=${1:-}
    [[ $# -gt 0 ]] && shift
    case $cmd in
        start) cmd_start "$@" ;;
        stop) cmd_stop "$@" ;;
        status) cmd_status "$@" ;;
        restart) cmd_stop && cmd_start ;;
        logs) tail -n "${1:-100}" "$LOG_FILE" ;;
        kill) cmd_kill ;;
        pause) signal_broker STOP "paused (SIGSTOP)" ;;
        resume) signal_broker CONT "resumed (SIGCONT)" ;;
        pid) cmd_pid ;;
        env) echo "export MEMSTREAM_KAFKA_BOOTSTRAP=$BOOTSTRAP" ;;
        -h | --help | help) usage ;;
        *)
            usage >&2
            exit 2
            ;;
    esac
}

main "$@"
