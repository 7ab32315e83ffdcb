#!/usr/bin/env bash
# SIGKILLs N ucx clients in the middle of their verbs against one memnode, then checks that the
# memnode is still up and serving. Usage (after `cargo build --release --features ucx`):
#
#   scripts/ucx-kill-clients.sh [N=200] [UCX_TLS=tcp]
#
# Each client is `dmindex fabric-bench` (every verb kind, 1 and 2 threads × 4 tasks), killed
# 0.1–0.9 s after it starts. Exit status 0 only if the memnode survived every kill.
set -u
n=${1:-200}
tls=${2:-tcp}
bin=${DMINDEX:-$(dirname "$0")/../target/release/dmindex}
dir=$(mktemp -d)
trap 'kill -INT "$mn" 2>/dev/null; wait "$mn" 2>/dev/null; rm -rf "$dir"' EXIT
echo "kill-test-token" > "$dir/token"
UCX_TLS=$tls "$bin" memnode --listen 127.0.0.1:0 --size 4g --token-file "$dir/token" \
    > "$dir/out" 2> "$dir/memnode.log" &
mn=$!
for _ in $(seq 100); do grep -q listening "$dir/out" 2>/dev/null && break; sleep 0.1; done
addr=$(head -1 "$dir/out" | awk '{print $NF}')
[ -n "$addr" ] || { echo "memnode did not start"; cat "$dir/memnode.log"; exit 1; }
# `exec`, so that `$!` of `client … &` is the client process itself, which SIGKILL must hit.
client() {
    UCX_TLS=$tls exec "$bin" fabric-bench --transport ucx --memnode "$addr" \
        --token-file "$dir/token" "$@"
}
for i in $(seq "$n"); do
    client --ops 1000000 --threads 1,2 --tasks 4 > /dev/null 2>&1 &
    c=$!
    sleep "0.$((RANDOM % 9 + 1))"
    kill -9 "$c" 2>/dev/null
    wait "$c" 2>/dev/null
    if ! kill -0 "$mn" 2>/dev/null; then
        echo "the memnode died after $i client kills:"
        grep -E "Fatal|Assert|panicked" "$dir/memnode.log" || tail -5 "$dir/memnode.log"
        exit 1
    fi
done
if (client --ops 200 --threads 1) > "$dir/final" 2>&1; then
    echo "the memnode survived $n client kills (UCX_TLS=$tls) and still serves"
else
    echo "the memnode is up after $n kills but a new client failed:"
    cat "$dir/final"
    exit 1
fi
