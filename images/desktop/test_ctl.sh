#!/usr/bin/env bash
# The CEP's test of the desktop image, as it ships, inside a real container
# (podman or docker): started as a sandbox would (the panel key mounted
# read-only, DESKD_SANDBOX_ID, the published port, a named volume for the
# home), it checks the supervisor contract, ownership, the panel through
# the port, attacks from inside as the GUI user, persistence across
# containers, and the idle cost. IMAGE names the image (make image).
# Prints one line per check; exits 1 if any failed.
set -uo pipefail
cd "$(dirname "$0")/../.."
. images/desktop/engine.sh
IMAGE=${IMAGE:-localhost/cubepod/desktop:dev}
PANELGW=${PANELGW:-bin/image/panelgw}
fails=0
ok() { echo "ok   $*"; }
bad() { echo "FAIL $*"; fails=$((fails + 1)); }
check() { # check DESCRIPTION COMMAND...: ok if the command succeeds
  local what=$1; shift
  if "$@"; then ok "$what"; else bad "$what"; fi
}
# jget PATH: a field of the JSON on stdin ("" if absent; objects as JSON).
jget() {
  node -e 'let s="";process.stdin.on("data",d=>s+=d).on("end",()=>{let v;try{v=JSON.parse(s)}catch{v=undefined}
    for(const k of process.argv[1].split(".").filter(Boolean)) v=v==null?undefined:v[k];
    console.log(v===undefined?"":typeof v==="object"?JSON.stringify(v):String(v))})' "$1"
}
freeport() { node -e 'const s=require("net").createServer().listen(0,"127.0.0.1",()=>{console.log(s.address().port);s.close()})'; }

work=$(mktemp -d -t deskd-ctl-XXXXXX)
name=deskd-ctl-$$
vol=deskd-ctl-home-$$
gwpid=
cleanup() {
  [ -n "$gwpid" ] && kill "$gwpid" 2>/dev/null
  engine rm -f "$name" "$name-b" >/dev/null 2>&1
  engine volume rm -f "$vol" >/dev/null 2>&1
  rm -rf "$work"
}
trap cleanup EXIT
port=$(freeport)
gwport=$(freeport)
sid=sbx-ctl
"$PANELGW" --secret ctl-test-master --print-key "$sid" >"$work/panel.key" && chmod 0444 "$work/panel.key" || { echo "FAIL panelgw --print-key"; exit 1; }

# deskd listens in the container on the port published (a token names
# the port the gateway reaches deskd on, and deskd checks it).
start_container() { # NAME HOSTNAME
  engine run -d --name "$1" --hostname "$2" -p "127.0.0.1:$port:$port" -e DESKD_LISTEN="0.0.0.0:$port" \
    -v "$work/panel.key:/run/secrets/panel.key:ro" -e DESKD_SANDBOX_ID=$sid -e DESKD_PANEL_SECRET_FILE=/run/secrets/panel.key \
    -v "$vol:/home/desktop" "$IMAGE" >/dev/null || return 1
  for _ in $(seq 100); do
    engine exec "$1" deskd health >/dev/null 2>&1 && return 0
    sleep 0.2
  done
  engine logs "$1" | tail -20
  return 1
}
in_c() { engine exec "$name" "$@"; }
ctl() { engine exec "$name" cubepod-desktop-ctl "$@"; }

engine volume create "$vol" >/dev/null
check "the image starts as a sandbox would (key read-only, sandbox id, port, home volume)" start_container "$name" host-a

# ---- what the image ships ----
fonts() { # each installed ("ii"), not merely known to dpkg
  local st
  st=$(in_c dpkg-query -W -f='${db:Status-Abbrev}\n' fonts-dejavu-core fonts-liberation fonts-noto-color-emoji fonts-noto-cjk 2>/dev/null) || return 1
  [ "$(echo "$st" | grep -c '^ii ')" = 4 ]
}
check "the fonts the image promises are installed" fonts
ctl_link() { [ "$(in_c sh -c 'readlink -f "$(command -v cubepod-desktop-ctl)"')" = /opt/cubepod/desktop/deskd ]; }
check "cubepod-desktop-ctl is deskd, on PATH" ctl_link

# ---- idle cost: nothing GUI runs until asked ----
idle=$(in_c ps -eo rss=,comm= | awk '$2 != "ps" { s += $1; n = n " " $2 "=" $1 } END { print s, n }')
idle_kib=${idle%% *}
echo "info idle container userspace: ${idle_kib} KiB RSS (${idle#* })"
check "idle container userspace <= 25 MiB RSS (${idle_kib} KiB)" test "$idle_kib" -le 25600
no_gui() { ! in_c pgrep -x Xvfb >/dev/null; }
check "nothing GUI runs before a start" no_gui

# ---- the contract: ten concurrent starts, one stack ----
in_c sh -c 'for i in 1 2 3 4 5 6 7 8 9 10; do cubepod-desktop-ctl start >/tmp/start$i.json 2>/tmp/start$i.err & done; wait; cat /tmp/start*.json' >"$work/starts"
lines=$(wc -l <"$work/starts")
xvfbs=$(while read -r l; do echo "$l" | jget pids.xvfb; done <"$work/starts" | sort -u | wc -l)
running=$(while read -r l; do echo "$l" | jget status; done <"$work/starts" | grep -c '^running$')
check "ten concurrent starts print ten lines of JSON, all running ($running)" test "$lines" = 10 -a "$running" = 10
check "ten concurrent starts give one stack (one Xvfb pid across them)" test "$xvfbs" = 1
check "one Xvfb and one Chromium browser process run" test "$(in_c pgrep -cx Xvfb)" = 1

# ---- start -> status -> start -> stop -> status: JSON lines, exit codes ----
seq_ok=1
out=$(ctl status); rc=$?; [ $rc = 0 ] && [ "$(echo "$out" | jget status)" = running ] || { seq_ok=0; echo "  status: $rc $out"; }
out=$(ctl start); rc=$?; [ $rc = 0 ] && [ "$(echo "$out" | jget status)" = running ] || { seq_ok=0; echo "  start: $rc $out"; }
out=$(ctl stop); rc=$?; [ $rc = 0 ] && [ "$(echo "$out" | jget status)" = stopped ] || { seq_ok=0; echo "  stop: $rc $out"; }
out=$(ctl status); rc=$?; [ $rc = 3 ] && [ "$(echo "$out" | jget status)" = stopped ] || { seq_ok=0; echo "  status: $rc $out"; }
check "start -> status -> start -> stop -> status: one JSON line each, exit codes 0 0 0 0 3" test $seq_ok = 1

# ---- a SingletonLock of another host is cleared ----
in_c ln -sfn otherhost-4242 /home/desktop/chromium-profile/SingletonLock
out=$(ctl start); rc=$?
lock=$(in_c readlink /home/desktop/chromium-profile/SingletonLock 2>/dev/null || true)
check "a SingletonLock naming another host is cleared: start runs ($rc), the lock is now $lock" \
  test $rc = 0 -a "$(echo "$out" | jget status)" = running -a "${lock#otherhost}" = "$lock"

# ---- everything belongs to 1000:1000 ----
others=$(in_c ps -eo uid=,gid=,comm= | awk '$1 != 1000 || $2 != 1000')
check "every process runs as 1000:1000${others:+ (not: $others)}" test -z "$others"
files=$(in_c find /run/cubepod/desktop /home/desktop /tmp /dev/shm -mindepth 1 ! -path /tmp/.X11-unix \( ! -uid 1000 -o ! -gid 1000 \) -print 2>/dev/null | head -5)
check "every file the stack made belongs to 1000:1000${files:+ (not: $files)}" test -z "$files"

# ---- the panel through the port, with a token from the gateway ----
"$PANELGW" --secret ctl-test-master --listen "127.0.0.1:$gwport" --sandbox "$sid=http://127.0.0.1:$port" >"$work/gw.log" 2>&1 &
gwpid=$!
for _ in $(seq 50); do curl -s -o /dev/null "http://127.0.0.1:$gwport/" && break; sleep 0.1; done
sr=$(curl -s -X POST "http://127.0.0.1:$gwport/sandboxes/$sid/desktop/start")
desk=$(echo "$sr" | jget desktopUrl)
cdp=$(echo "$sr" | jget cdpUrl)
base=${cdp%/cdp}
check "the gateway's start through the port answers the panel's URLs" test -n "$desk" -a -n "$cdp"
check "the desktop page through the panel" sh -c "curl -sf '$desk' | grep -q desktop.js"
ws() { # ws URL [PROTOCOL]: the upgrade's status line
  curl -s -i -N --max-time 3 --http1.1 -H "Connection: Upgrade" -H "Upgrade: websocket" -H "Sec-WebSocket-Version: 13" \
    -H "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==" ${2:+-H "Sec-WebSocket-Protocol: $2"} "$1" 2>/dev/null | head -c 4096 | tr -d '\r' | head -1
}
check "noVNC's WebSocket through the panel (RFB 003.008 follows)" sh -c "curl -s -i -N --max-time 3 --http1.1 -H 'Connection: Upgrade' -H 'Upgrade: websocket' -H 'Sec-WebSocket-Version: 13' -H 'Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==' -H 'Sec-WebSocket-Protocol: binary' '${base/http/http}/websockify' 2>/dev/null | grep -aq 'RFB 003.008'"
check "the terminal's WebSocket through the panel" test "$(ws "$base/terminal/ws" tty)" = "HTTP/1.1 101 Switching Protocols"
check "CDP /json/version through the panel" sh -c "curl -sf '$cdp/json/version' | grep -q webSocketDebuggerUrl"
check "the accessibility snapshot through the panel lists the address bar" sh -c "curl -sf --max-time 20 '$base/computer/a11y?format=text&interactive=1' | grep -q 'Address and search bar'"
check "without a token: 403" test "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/vnc.html")" = 403

# ---- attacks from inside, as the GUI user ----
before=$(in_c sh -c 'sha256sum /etc/passwd /etc/shadow 2>/dev/null; stat -c "%u:%g %a %n" /etc /etc/passwd /opt/cubepod/desktop/deskd /usr/bin/chromium')
ctl stop >/dev/null
in_c sh -c 'rm -f /home/desktop/chromium-profile/SingletonLock; ln -s /etc/passwd /home/desktop/chromium-profile/SingletonLock'
in_c sh -c 'mv /run/cubepod/desktop/logs /run/cubepod/desktop/logs.moved && ln -sfn /etc /run/cubepod/desktop/logs'
ctl start >/dev/null 2>&1
in_c sh -c 'rm -f /run/cubepod/desktop/logs; mv /run/cubepod/desktop/logs.moved /run/cubepod/desktop/logs'
ctl start >/dev/null 2>&1
chrome=$(ctl status | jget pids.chromium)
in_c pkill -9 -x chromium
for _ in $(seq 60); do
  now=$(ctl status | jget pids.chromium)
  [ -n "$now" ] && [ "$now" != "$chrome" ] && [ "$(ctl status | jget status)" = running ] && break
  sleep 0.5
done
after=$(in_c sh -c 'sha256sum /etc/passwd /etc/shadow 2>/dev/null; stat -c "%u:%g %a %n" /etc /etc/passwd /opt/cubepod/desktop/deskd /usr/bin/chromium')
check "links into /etc (the profile's lock, the run dir's logs) and a killed Chromium change nothing outside the user's reach" test "$before" = "$after"
check "a killed Chromium is back (pid $chrome -> $now)" test "$(ctl status | jget status)" = running -a "$now" != "$chrome"

# ---- persistence: a cookie survives stop, the container, a new hostname ----
node images/desktop/cdp_cookie.mjs set "${cdp/http/ws}" >/dev/null 2>"$work/cookie.err" || cat "$work/cookie.err"
ctl stop >/dev/null
engine rm -f "$name" >/dev/null
name=$name-b
if start_container "$name" host-b; then
  kill "$gwpid" 2>/dev/null; wait "$gwpid" 2>/dev/null
  "$PANELGW" --secret ctl-test-master --listen "127.0.0.1:$gwport" --sandbox "$sid=http://127.0.0.1:$port" >>"$work/gw.log" 2>&1 &
  gwpid=$!
  for _ in $(seq 50); do curl -s -o /dev/null "http://127.0.0.1:$gwport/" && break; sleep 0.1; done
  cdp=$(curl -s -X POST "http://127.0.0.1:$gwport/sandboxes/$sid/desktop/start" | jget cdpUrl)
  got=$(node images/desktop/cdp_cookie.mjs get "${cdp/http/ws}" 2>"$work/cookie.err") || cat "$work/cookie.err"
  check "a cookie survives deskd stop, the container's removal and a new container with another hostname ($got)" test "$got" = kept-42
else
  bad "a second container on the same home volume starts"
fi

size=$(engine image inspect --format '{{.Size}}' "$IMAGE" | awk '{ printf "%.0f", $1 / 1048576 }')
echo "info image $IMAGE: $size MiB"
if [ $fails -gt 0 ]; then
  echo "test_ctl.sh: $fails checks failed"
  exit 1
fi
echo "test_ctl.sh: all checks passed"
