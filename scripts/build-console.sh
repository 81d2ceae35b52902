#!/usr/bin/env bash
# Builds the web console (console/, docs/design.md §17) into agentmesh/console_dist/, the files the
# dispatcher's HTTP listener serves at /console (agentmesh/rpc/console.py):
#   1. the TypeScript stubs of protos/agentmesh/v1 (protoc-gen-es, package.json's pin) into console/gen/;
#   2. a type check of console/src with the pinned TypeScript (strict);
#   3. one minified bundle, console.js, by the pinned esbuild; index.html, console.css and favicon.svg
#      copied as they are.
# The output is committed and reproducible: the same sources and pins give the same bytes
# (tests/console/test_console_build.py rebuilds it and compares). Nothing is downloaded.
#
#   scripts/build-console.sh [OUT]    OUT defaults to agentmesh/console_dist
set -euo pipefail

REPO=$(cd "$(dirname "$0")/.." && pwd)
OUT=${1:-$REPO/agentmesh/console_dist}
BIN=$REPO/node_modules/.bin
for tool in buf protoc-gen-es tsc esbuild; do
  [[ -x "$BIN/$tool" ]] || { echo "build-console: $BIN/$tool is missing: run make venv (npm ci)" >&2; exit 1; }
done

cd "$REPO"
rm -rf console/gen
"$BIN/buf" generate --path protos/agentmesh/v1 --template \
  '{"version":"v2","plugins":[{"local":"node_modules/.bin/protoc-gen-es","out":"console/gen","opt":"target=ts","include_imports":true}]}'
"$BIN/tsc" -p console

mkdir -p "$OUT"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$BIN/esbuild" console/src/main.ts --bundle --minify --format=iife --target=es2022 --platform=browser \
  --legal-comments=eof --log-level=warning --outfile="$tmp/console.js"
cp console/index.html console/console.css console/favicon.svg "$tmp/"
# Replaced whole: a file removed from the console leaves no stale copy behind.
rm -f "$OUT"/*
cp "$tmp"/* "$OUT/"
