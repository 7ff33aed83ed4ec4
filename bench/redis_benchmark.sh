#!/usr/bin/env bash
# redis_benchmark.sh HOST PORT [KEY [redis-benchmark options...]]
#
# The baseline of BenchmarkPush100kDirtyKeys: redis-benchmark sending
# 1,000,000 HINCRBYFLOAT of random fields (100,000 distinct, -r) of one hash,
# pipelined 16 deep (-P) over its default 50 connections, against a Redis
# server that is already running (this script starts nothing). KEY defaults
# to ratesync:bench:h; the hash is left in place (delete it afterwards).
# Extra options (-a PASSWORD, --dbnum N, -c CLIENTS...) go to
# redis-benchmark. Prints redis-benchmark's one-line summary (-q).
set -euo pipefail
if [ $# -lt 2 ]; then
	echo "usage: $0 HOST PORT [KEY [redis-benchmark options...]]" >&2
	exit 2
fi
host=$1 port=$2
key=${3:-ratesync:bench:h}
shift $(($# < 3 ? $# : 3))
exec redis-benchmark -h "$host" -p "$port" -n 1000000 -r 100000 -P 16 -q "$@" \
	HINCRBYFLOAT "$key" __rand_int__ 1.5
