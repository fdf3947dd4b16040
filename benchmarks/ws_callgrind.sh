#!/usr/bin/env bash
# User-space instructions per WebSocket echo (1 MiB binary messages; SIZE=32 for small text
# ones) of a ferrocorn build under callgrind, over HTTP/1.1 and HTTP/2: two runs of
# ws_bench's load generator (one connection) of different lengths, the difference of the instruction totals over the difference of the messages
# (start-up and handshakes cancel out). Deterministic, unlike CPU time on a shared machine.
#
#   PYTHON=venv/bin/python PKG=dir-with-ferrocorn benchmarks/ws_callgrind.sh [h1] [h2]
#
# Prints "transport duration instructions messages" per run, then instructions per message.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(dirname "$here")
py=${PYTHON:-python3}
pkg=${PKG:-$repo/python}
out=${OUT:-/tmp/ws_callgrind}
mkdir -p "$out"
for transport in "${@:-h1 h2}"; do
  declare -a runs=()
  for dur in ${DURATIONS:-4 12}; do
    file="$out/$transport.$dur.out"
    port=$(python3 -c "import socket; s=socket.socket(); s.bind(('127.0.0.1',0)); print(s.getsockname()[1])")
    (cd "$repo" && PYTHONPATH="$pkg:$repo" exec valgrind --tool=callgrind --trace-children=no \
      --callgrind-out-file="$file" "$py" -m ferrocorn benchmarks.ws_bench:app --host 127.0.0.1 \
      --port "$port" --no-access-log --log-level warning) > "$out/server.log" 2>&1 &
    vpid=$!
    until python3 -c "import socket,sys; socket.create_connection(('127.0.0.1',int(sys.argv[1])),0.2)" "$port" 2>/dev/null; do sleep 0.5; done
    result=$(python3 "$here/ws_bench.py" --loadgen --port "$port" --server-pid "$vpid" --conns 1 \
      --size "${SIZE:-1048576}" --warmup 0 --duration "$dur" --transport "$transport" | tail -1)
    kill -INT "$vpid"; wait "$vpid" || true
    msgs=$(python3 -c "import json,sys; print(json.loads(sys.argv[1])['messages'])" "$result")
    instr=$(callgrind_annotate "$file" 2>/dev/null | awk '/PROGRAM TOTALS/ {gsub(",","",$1); print $1}')
    echo "$transport $dur $instr $msgs"
    runs+=("$instr $msgs")
  done
  python3 -c "
import sys
(i1, m1), (i2, m2) = [tuple(map(int, r.split())) for r in sys.argv[2:4]]
print('%s: %d instructions per message' % (sys.argv[1], (i2 - i1) // (m2 - m1)))
" "$transport" "${runs[0]}" "${runs[1]}"
done
