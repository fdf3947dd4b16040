#!/bin/bash
# usage: recycle.sh PORT EXTRA...   (from the repo root; PYTHON= an interpreter with ferrocorn)
# 2 workers of tests.apps.basic:app (or APP=module:attr) under `wrk -t2 -c16 -d10s` on /hello
# (or URLPATH=/path; CONNS=N connections); prints req/s, p99,
# wrk's errors, the server tree's CPU (user+sys of the supervisor and all its descendants)
# per request, its minor page faults and context switches per request, and how many workers
# started.
port=$1; shift
log=/tmp/ferrocorn-recycle-srv-$port.log
# As deployed: the app's bytecode cached (compileall writes it even under PYTHONDONTWRITEBYTECODE),
# so that each worker that imports the app does not compile it again.
${PYTHON:-python3} -m compileall -q tests > /dev/null
PYTHONPATH=. /usr/bin/time -f "TREECPU %U %S %R %c %w" ${PYTHON:-python3} -m ferrocorn ${APP:-tests.apps.basic:app} \
    --port $port --no-access-log --workers 2 "$@" > $log 2>&1 &
pid=$!
for i in $(seq 100); do [ "$(grep -c 'Started worker' $log 2>/dev/null)" -ge 2 ] && break; sleep 0.1; done
sleep 0.5
out=$(wrk -t2 -c${CONNS:-16} -d${DUR:-10}s --latency http://127.0.0.1:$port${URLPATH:-/hello})
pkill -TERM -P $pid; wait $pid
rps=$(echo "$out" | awk '/Requests\/sec/{print $2}')
reqs=$(echo "$out" | awk '/requests in/{print $1}')
p99=$(echo "$out" | awk '$1=="99%"{print $2}')
errors=$(echo "$out" | grep -E "Socket errors|Non-2xx" | tr '\n' ' ')
cpu=$(awk '/TREECPU/{print $2+$3}' $log)
faults=$(awk '/TREECPU/{print $4}' $log)
switches=$(awk '/TREECPU/{print $5+$6}' $log)
starts=$(grep -c "Started worker" $log)
echo "[$*] req/s=$rps p99=$p99 tree_cpu=${cpu}s cpu_us/req=$(awk -v c=$cpu -v r=$reqs 'BEGIN{printf "%.1f", c*1e6/r}') faults/req=$(awk -v f=$faults -v r=$reqs 'BEGIN{printf "%.2f", f/r}') switches/req=$(awk -v f=$switches -v r=$reqs 'BEGIN{printf "%.2f", f/r}') starts=$starts $errors"
