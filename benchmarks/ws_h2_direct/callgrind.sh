#!/usr/bin/env bash
# Instructions per 1 MiB echo for each variant under callgrind: two runs of the load
# generator (one connection) of different lengths, the difference divided by the messages
# the longer one added (start-up and handshake cancel out). Usage: callgrind.sh VARIANT...
# (h1, hyper, direct, with :nobatch / :noappcopy as in run.py). Prints "variant instructions messages".
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bin=${BIN:-/work/target-ws2/release/ws_h2_direct}
out=${OUT:-/tmp/ws_h2_direct_callgrind}
mkdir -p "$out"
for variant in "$@"; do
  mode=${variant%%:*}
  flags=()
  [[ $variant == *:nobatch* ]] && flags+=(--no-batch)
  [[ $variant == *:noappcopy* ]] && flags+=(--no-app-copy)
  transport=h2; [[ $mode == h1 ]] && transport=h1
  for dur in ${DURATIONS:-4 12}; do
    file="$out/$variant.$dur.out"
    rm -f "$out/port"
    valgrind --tool=callgrind --callgrind-out-file="$file" "$bin" --mode "$mode" --port 0 "${flags[@]}" \
      > "$out/port" 2>/dev/null &
    vpid=$!
    until grep -q listening "$out/port" 2>/dev/null; do sleep 0.2; done
    port=$(awk '{print $NF}' "$out/port")
    result=$(python3 "$here/../ws_bench.py" --loadgen --port "$port" --server-pid "$vpid" --conns 1 \
      --size 1048576 --warmup 0 --duration "$dur" --transport "$transport" | tail -1)
    kill -TERM "$vpid"; wait "$vpid" || true
    msgs=$(python3 -c "import json,sys; print(json.loads(sys.argv[1])['messages'])" "$result")
    instr=$(callgrind_annotate "$file" 2>/dev/null | awk '/PROGRAM TOTALS/ {gsub(",","",$1); print $1}')
    echo "$variant $dur $instr $msgs"
  done
done
