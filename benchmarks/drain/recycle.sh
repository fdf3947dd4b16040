#!/bin/bash
# usage: recycle.sh PORT EXTRA...
port=$1; shift
PYTHONPATH=python ${PYTHON:-python3} -m ferrocorn tests.apps.basic:app --port $port --no-access-log --workers 2 "$@" > /tmp/ferrocorn-recycle-srv.log 2>&1 &
pid=$!
for i in $(seq 100); do grep -c "Started worker" /tmp/ferrocorn-recycle-srv.log 2>/dev/null | grep -q 2 && break; sleep 0.1; done
wrk -t2 -c16 -d10s --latency http://127.0.0.1:$port/hello | grep -E "Requests/sec|99%|Socket errors|Non-2xx"
kill -TERM $pid; wait $pid
