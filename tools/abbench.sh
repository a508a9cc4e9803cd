#!/bin/bash
# abbench.sh BEFORE AFTER [ROUNDS]: runs s3bench (single node) and clusterbench (single
# node and a 3-node cluster) on two cairn binaries, alternating, ROUNDS (default 3) rounds
# back to back, for before/after comparisons (docs/benchmarks.md). Results go to
# $OUT (default /tmp/abbench). Both binaries must accept the flags the tools of this tree
# pass (build the tools here, e.g. go build -o /tmp/s3bench ./tools/s3bench).
set -eu
before=$1 after=$2 rounds=${3:-3}
out=${OUT:-/tmp/abbench}
mkdir -p "$out"
go build -o "$out/s3bench" ./tools/s3bench
go build -o "$out/clusterbench" ./tools/clusterbench
for round in $(seq "$rounds"); do
  for which in before after; do
    bin=$before; [ "$which" = after ] && bin=$after
    echo "== round $round $which $(date +%T)"
    "$out/s3bench" --cairn "$bin" --duration 5s --phases put-4k,get-4k,put-16m,get-16m > "$out/s3-$which-$round.txt" 2>&1
    "$out/clusterbench" --cairn "$bin" --duration 5s > "$out/cl-$which-$round.txt" 2>&1
  done
done
