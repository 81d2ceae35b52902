#!/usr/bin/env bash
# Builds what buf.gen.yaml generated (`make gen`): the Go and TypeScript example clients and the Java
# stubs, with the toolchains scripts/install-toolchains.sh installs and the npm packages of
# package.json. Nothing is downloaded: Go builds in GOPATH mode against Debian's /usr/share/gocode.
#
#   scripts/build-clients.sh go|ts|java|java-client|all [ROOT]
#   scripts/build-clients.sh go-deps     compile the Go dependencies into Go's build cache only
#
# ROOT (default: this checkout) holds gen/, examples/clients/ and node_modules/, as the tests' fresh
# copies do. Outputs: ROOT/build/clients/agentmesh-go-client, ROOT/examples/clients/ts/dist/ (run
# dist/examples/clients/ts/client.js), ROOT/build/clients/java/ (the stubs' classes),
# ROOT/build/clients/agentmesh-java-client (the Java example: a launcher of its classes, the stubs' and
# Debian's jars; `java-client` builds the stubs first).
set -euo pipefail

REPO=$(cd "$(dirname "$0")/.." && pwd)
what=${1:-all}
ROOT=$(cd "${2:-$REPO}" && pwd)
OUT="$ROOT/build/clients"
# The import path of the generated package: go_package in protos/agentmesh/v1/*.proto, without the
# trailing /agentmesh/v1 that paths=source_relative puts under gen/go.
GO_MODULE_ROOT=github.com/agentmesh/agentmesh

need() {
  command -v "$1" >/dev/null || { echo "build-clients: $1 not found: run make toolchains" >&2; exit 1; }
}

# The packages the generated code and the example import, from Debian's /usr/share/gocode.
GO_DEPS=(
  google.golang.org/grpc google.golang.org/grpc/codes google.golang.org/grpc/metadata google.golang.org/grpc/status
  google.golang.org/genproto/googleapis/rpc/errdetails google.golang.org/genproto/googleapis/api/annotations
  google.golang.org/protobuf/encoding/protojson google.golang.org/protobuf/reflect/protoreflect
  google.golang.org/protobuf/runtime/protoimpl google.golang.org/protobuf/types/known/timestamppb
  google.golang.org/protobuf/types/known/durationpb
)
# GOPATH mode (no go.mod, no module proxy, no download); -trimpath keys the build cache by import path
# rather than directory, so every checkout and test copy shares one cache.
GO_ENV=(GO111MODULE=off GOFLAGS= GOPROXY=off)

# A fresh machine compiles grpc-go and protobuf-go once (about a minute of CPU); install-toolchains.sh
# runs this right after installing them, so the first `make test` finds them cached.
build_go_deps() {
  need go
  env GOPATH=/usr/share/gocode "${GO_ENV[@]}" go build -trimpath "${GO_DEPS[@]}"
}

build_go() {
  need go
  [[ -d "$ROOT/gen/go/agentmesh/v1" ]] || { echo "build-clients: $ROOT/gen/go is missing: run make gen" >&2; exit 1; }
  # A private GOPATH whose only package is ROOT's generated one (a symlink to gen/go); the rest comes from
  # Debian's golang-*-dev packages.
  local gopath="$OUT/gopath"
  rm -rf "$gopath"
  mkdir -p "$gopath/src/$GO_MODULE_ROOT/gen"
  ln -sfn "$ROOT/gen/go" "$gopath/src/$GO_MODULE_ROOT/gen/go"
  (
    cd "$ROOT/examples/clients/go"
    env GOPATH="$gopath:/usr/share/gocode" "${GO_ENV[@]}" go build -trimpath -o "$OUT/agentmesh-go-client" .
  )
}

build_ts() {
  local tsc="$ROOT/node_modules/.bin/tsc"
  [[ -x "$tsc" ]] || { echo "build-clients: $tsc is missing: run make venv (npm ci)" >&2; exit 1; }
  [[ -d "$ROOT/gen/ts/agentmesh/v1" ]] || { echo "build-clients: $ROOT/gen/ts is missing: run make gen" >&2; exit 1; }
  rm -rf "$ROOT/examples/clients/ts/dist"
  "$tsc" -p "$ROOT/examples/clients/ts"
}

build_java() {
  need javac
  [[ -d "$ROOT/gen/java" ]] || { echo "build-clients: $ROOT/gen/java is missing: run make gen" >&2; exit 1; }
  local jars=(protobuf grpc-api grpc-stub grpc-protobuf guava proto-google-common-protos geronimo-annotation-1.3-spec)
  local jarpaths=() jar
  for jar in "${jars[@]}"; do
    [[ -f "/usr/share/java/$jar.jar" ]] || { echo "build-clients: /usr/share/java/$jar.jar is missing: run make toolchains" >&2; exit 1; }
    jarpaths+=("/usr/share/java/$jar.jar")
  done
  local classpath
  classpath=$(IFS=:; echo "${jarpaths[*]}")
  # One short-lived JVM: the C1 compiler and serial GC start faster than the defaults (about a third
  # less wall time for these ~200 files); -nowarn: generated code's deprecations are not ours.
  local flags=(-J-XX:TieredStopAtLevel=1 -J-XX:+UseSerialGC -proc:none -nowarn -encoding UTF-8 --release 11)
  local sources
  mapfile -t sources < <(cd "$ROOT/gen/java" && find . -name '*.java' | LC_ALL=C sort)
  ((${#sources[@]})) || { echo "build-clients: no Java sources under $ROOT/gen/java: run make gen" >&2; exit 1; }
  # A build cache, like Go's: classes are reused only when every input is byte-identical (the
  # sources, the jars, the compiler and its flags), so a cached build is the same build.
  local key
  key=$(
    {
      # The compiler's identity without starting a JVM: its path and its JDK's release file.
      local javac_path
      javac_path=$(readlink -f "$(command -v javac)")
      echo "$javac_path"
      cat "$(dirname "$(dirname "$javac_path")")/release" 2>/dev/null || javac -version 2>&1
      printf '%s\n' "${flags[@]}"
      sha256sum "${jarpaths[@]}"
      (cd "$ROOT/gen/java" && sha256sum "${sources[@]}")
    } | sha256sum | cut -c1-32
  )
  local cache="${CLIENTS_BUILD_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/agentmesh-clients}/javac/$key"
  rm -rf "$OUT/java"
  mkdir -p "$OUT"
  if [[ "${CLIENTS_BUILD_CACHE:-}" != off && -f "$cache/.complete" ]]; then
    cp -R "$cache/classes" "$OUT/java"
    touch "$cache" # recently used: kept by the pruning below
    echo "build-clients: java: classes of identical inputs reused from $cache"
    return
  fi
  mkdir -p "$OUT/java"
  (cd "$ROOT/gen/java" && javac "${flags[@]}" -cp "$classpath" -d "$OUT/java" "${sources[@]}")
  if [[ "${CLIENTS_BUILD_CACHE:-}" != off ]]; then
    # Filled beside the final name and renamed into place, so a concurrent build never sees half of it.
    local partial="$cache.$$"
    rm -rf "$partial" && mkdir -p "$partial" && cp -R "$OUT/java" "$partial/classes" && touch "$partial/.complete"
    mv -T "$partial" "$cache" 2>/dev/null || rm -rf "$partial"
    # Bounded: the five most recently used builds (one per recent state of the protos) stay.
    local stale
    mapfile -t stale < <(ls -1dt "$(dirname "$cache")"/*/ 2>/dev/null | tail -n +6)
    ((${#stale[@]} == 0)) || rm -rf "${stale[@]}"
  fi
}

# The Java example's jars (Debian's): grpc-java 1.41 with its Netty transport and what grpc-core loads at
# run time (Gson for service configs, PerfMark, OpenCensus), protobuf-java with JsonFormat (protobuf-util),
# and the common protos' Status.
JAVA_CLIENT_JARS=(
  protobuf protobuf-util grpc-api grpc-context grpc-core grpc-netty grpc-stub grpc-protobuf grpc-protobuf-lite
  guava proto-google-common-protos gson perfmark-api opencensus-api opencensus-contrib-grpc-metrics
  netty-buffer netty-codec netty-codec-http netty-codec-http2 netty-codec-socks netty-common netty-handler
  netty-handler-proxy netty-resolver netty-transport
  geronimo-annotation-1.3-spec
)

build_java_client() {
  build_java
  need protoc
  local jarpaths=() jar
  for jar in "${JAVA_CLIENT_JARS[@]}"; do
    [[ -f "/usr/share/java/$jar.jar" ]] || { echo "build-clients: /usr/share/java/$jar.jar is missing: run make toolchains" >&2; exit 1; }
    jarpaths+=("/usr/share/java/$jar.jar")
  done
  local src="$OUT/java-client-src" classes="$OUT/java-client"
  rm -rf "$src" "$classes" && mkdir -p "$src" "$classes"
  # google.rpc.ErrorInfo is newer than Debian's proto-google-common-protos 1.16: generated here from the
  # vendored error_details.proto, its classes first on the class path.
  protoc -I "$REPO/protos/third_party" --java_out="$src" google/rpc/error_details.proto
  local sources
  mapfile -t sources < <(find "$src" "$ROOT/examples/clients/java" -name '*.java' | LC_ALL=C sort)
  local classpath
  classpath=$(IFS=:; echo "$OUT/java:${jarpaths[*]}")
  javac -J-XX:TieredStopAtLevel=1 -J-XX:+UseSerialGC -proc:none -nowarn -encoding UTF-8 --release 17 \
    -cp "$classpath" -d "$classes" "${sources[@]}"
  local launcher="$OUT/agentmesh-java-client"
  {
    echo '#!/bin/sh'
    echo "# The Java example client (examples/clients/java), built by scripts/build-clients.sh java-client."
    echo "exec java -XX:TieredStopAtLevel=1 -XX:+UseSerialGC -cp '$classes:$classpath' com.agentmesh.examples.Client \"\$@\""
  } >"$launcher"
  chmod +x "$launcher"
}

case "$what" in
  go) build_go ;;
  go-deps) build_go_deps ;;
  ts) build_ts ;;
  java) build_java ;;
  java-client) build_java_client ;;
  all) build_go; build_ts; build_java_client ;;
  *) echo "usage: $0 go|ts|java|java-client|all|go-deps [ROOT]" >&2; exit 2 ;;
esac
