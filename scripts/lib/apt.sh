# Sourced by the scripts that need Debian packages: `apt_install WHO [--recommends] PACKAGE...`.
# As root, installs them with apt-get (its output on stderr: each script's stdout carries only what its
# callers read, a path or a URL); two installs at once wait for each other instead of failing on apt's
# own lock. Any other user is told the command to run as root, and the call fails.

apt_install() {
  local who=$1 recommends=(--no-install-recommends)
  shift
  if [[ ${1:-} == --recommends ]]; then
    recommends=()
    shift
  fi
  if [[ $EUID -ne 0 ]]; then
    echo "$who: missing $*; install them as root: apt-get install -y ${recommends[*]} $*" >&2
    return 1
  fi
  echo "$who: installing $* with apt-get" >&2
  (
    flock 9 &&
      apt-get update -q >&2 &&
      DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${recommends[@]}" "$@" >&2
  ) 9>"${TMPDIR:-/tmp}/docsum-apt.lock"
}
