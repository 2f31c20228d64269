#!/usr/bin/env bash
# What `make run` needs on the machine: Xvfb, xauth, Chromium, openbox, x264,
# fonts, and npm for the pinned web assets. On Debian or Ubuntu the missing
# ones are installed with apt-get when running as root (or with sudo when
# it needs no password); otherwise the exact command is printed and the
# script fails. DESKD_DEPS_DRY=1 prints the command instead of running it.
set -euo pipefail

missing=()
need() { # need PACKAGE COMMAND...: PACKAGE unless one of the commands exists
  local pkg=$1; shift
  for c in "$@"; do command -v "$c" >/dev/null 2>&1 && return 0; done
  missing+=("$pkg")
}
need xvfb Xvfb
need xauth xauth
need chromium chromium chromium-browser google-chrome-stable google-chrome
need openbox openbox
need x264 x264 # H.264 for what moves on the screen (optional: without it deskd sends no H.264)
need npm npm
# The accessibility snapshot (optional: without them the browser exports nothing)
need dbus-daemon dbus-daemon
[ -e /usr/share/defaults/at-spi2/accessibility.conf ] || missing+=(at-spi2-core)
[ -e /usr/share/fonts/truetype/dejavu/DejaVuSans.ttf ] || missing+=(fonts-dejavu-core)
[ -d /usr/share/fonts/truetype/liberation ] || missing+=(fonts-liberation)

if ! command -v go >/dev/null 2>&1; then
  echo "deps: Go is not installed: get Go 1.26 or newer from https://go.dev/dl/ (Debian's golang package is too old)" >&2
  exit 1
fi
[ ${#missing[@]} -eq 0 ] && exit 0

cmd="apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends ${missing[*]}"
if ! command -v apt-get >/dev/null 2>&1; then
  echo "deps: missing ${missing[*]}, and this is not a Debian or Ubuntu machine: install them with its package manager" >&2
  exit 1
fi
if [ "$(id -u)" = 0 ]; then
  run="$cmd"
elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
  run="sudo sh -c '$cmd'"
else
  echo "deps: missing ${missing[*]}; install them as root with:" >&2
  echo "  sudo sh -c '$cmd'" >&2
  exit 1
fi
echo "deps: installing ${missing[*]}" >&2
if [ "${DESKD_DEPS_DRY:-}" = 1 ]; then
  echo "$run"
  exit 0
fi
sh -c "$run"
