#!/usr/bin/env bash
# The test command (README): installs what the tests need when it is missing, checks gofmt and
# go vet, then runs every test. The Redis tests start their own redis-server processes on free loopback ports; they never
# touch 6379. A missing redis-server (or chromium, which the status page's browser test drives
# headless) is installed with apt-get when we are root on Debian, and otherwise named, so a test
# never skips silently. Arguments go to `go test` (default ./...).
set -euo pipefail
cd "$(dirname "$0")/.."

need() { # need BINARY PACKAGE
  command -v "$1" >/dev/null 2>&1 && return 0
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "test.sh: $1 not found: installing Debian's $2" >&2
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$2" >/dev/null
    command -v "$1" >/dev/null 2>&1 && return 0
  fi
  echo "test.sh: $1 not found: install it (Debian: apt-get install $2) and run again" >&2
  exit 1
}

need redis-server redis-server
need redis-cli redis-tools
need chromium chromium

# Formatting and vet first: the same checks for a developer as for CI.
unformatted=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go' -not -path './.git/*'))
if [ -n "$unformatted" ]; then
  echo "test.sh: gofmt needed:" >&2
  echo "$unformatted" >&2
  exit 1
fi
go vet ./...

if [ $# -eq 0 ]; then set -- ./...; fi
exec go test "$@"
