# Sourced by build.sh and test_ctl.sh: the container engine, podman or
# docker, with what this kind of machine needs for podman (runc, cgroupfs,
# no default ulimits; see DESIGN.md).
if [ -n "${ENGINE:-}" ]; then
  :
elif command -v podman >/dev/null 2>&1; then
  ENGINE=podman
elif command -v docker >/dev/null 2>&1; then
  ENGINE=docker
else
  echo "needs podman or docker" >&2
  return 1 2>/dev/null || exit 1
fi
engine() {
  if [ "$(basename "$ENGINE")" = podman ]; then
    if [ -z "${CONTAINERS_CONF:-}" ]; then
      CONTAINERS_CONF=$(mktemp -t deskd-containers-XXXXXX.conf)
      printf '[containers]\ndefault_ulimits = []\n' >"$CONTAINERS_CONF"
      export CONTAINERS_CONF
    fi
    local rt=()
    command -v runc >/dev/null 2>&1 && rt=(--runtime runc)
    "$ENGINE" "${rt[@]}" --cgroup-manager=cgroupfs "$@"
  else
    "$ENGINE" "$@"
  fi
}
