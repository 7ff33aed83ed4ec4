#!/usr/bin/env bash
# compare.sh REV [PACKAGE] [BENCH] [COUNT]: a package's benchmarks at git
# revision REV and in this work tree, in one run: both test binaries are
# built first, then run in turn COUNT times (default 6), so that both see
# the same machine; benchstat (golang.org/x/perf/cmd/benchstat, installed
# when missing) compares them, the ratios the benchmarks report included.
#
#   bench/compare.sh 2057828 ./ratelimiting/ 'Baseline|IncrementExisting|SlidingWindow|Allow3Limits|BucketAllow'
set -euo pipefail
rev=${1:?usage: compare.sh REV [PACKAGE] [BENCH] [COUNT]}
pkg=${2:-./ratelimiting/}
bench=${3:-.}
count=${4:-6}
top=$(git rev-parse --show-toplevel)
tmp=$(mktemp -d)
trap 'git -C "$top" worktree remove --force "$tmp/before" >/dev/null 2>&1 || true; rm -rf "$tmp"' EXIT

git -C "$top" worktree add --detach -q "$tmp/before" "$rev"
(cd "$tmp/before" && go test -c -o "$tmp/before.test" "$pkg")
(cd "$top" && go test -c -o "$tmp/after.test" "$pkg")

dir=${pkg#./}
for i in $(seq "$count"); do
  for side in before after; do
    root=$top
    [ "$side" = before ] && root=$tmp/before
    (cd "$root/$dir" && "$tmp/$side.test" -test.run '^$' -test.bench "$bench" -test.benchtime 1s -test.count 1) >>"$tmp/$side.txt"
  done
  echo "round $i of $count done" >&2
done

export PATH="$(go env GOPATH)/bin:$PATH"
command -v benchstat >/dev/null || go install golang.org/x/perf/cmd/benchstat@latest
benchstat "$tmp/before.txt" "$tmp/after.txt"
