#!/bin/bash
# Usage: scripts/peak-rss.sh DIR [SERVE FLAGS...]
# Runs the release binary as `kartograf serve --manifests DIR` on free loopback ports, waits
# until /readyz answers, and prints the time to ready and the process's peak and current RSS
# (VmHWM / VmRSS from /proc). KARTOGRAF_BIN overrides the binary. Used for BENCHMARKS.md.
set -u
K=${KARTOGRAF_BIN:-${CARGO_TARGET_DIR:-target}/release/kartograf}
P1=$((20000 + RANDOM % 10000)); P2=$((P1+1))
start=$(date +%s.%N)
$K serve --manifests "$1" --listen 127.0.0.1:$P1 --admin-listen 127.0.0.1:$P2 "${@:2}" 2>"${PEAK_LOG:-/dev/null}" &
pid=$!
for i in $(seq 1 1200); do
  if curl -s -o /dev/null -w "%{http_code}" http://127.0.0.1:$P2/readyz 2>/dev/null | grep -q 200; then break; fi
  sleep 0.1
done
end=$(date +%s.%N)
sleep 1
echo "ready after $(echo "$end - $start" | bc) s; peak RSS $(( $(grep VmHWM /proc/$pid/status | awk '{print $2}') / 1024 )) MiB; RSS now $(( $(grep VmRSS /proc/$pid/status | awk '{print $2}') / 1024 )) MiB"
kill $pid; wait $pid 2>/dev/null
