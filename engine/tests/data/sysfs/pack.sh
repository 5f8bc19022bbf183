#!/usr/bin/env bash
# Rebuilds the vendored sysfs archives from a checkout of the shared test data:
#   engine/tests/data/sysfs/pack.sh [SRC]        (SRC defaults to ../shared/sysfs beside the repository)
# One <machine>.tar.gz per machine directory, reproducible: entries sorted by name, mtime 0,
# uid/gid 0, modes normalised to 0644/0755 (contents are what matters), gzip without a
# name or timestamp. The copy of the data this was made from stores sysfs's
# `cpuN/nodeK` and `nodeK/cpuN` links as small regular files holding the link target;
# they are restored to the relative symlinks they are in real sysfs (and in the upstream
# dumps). Everything else is byte-for-byte.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
src="$(cd "${1:-$here/../../../../shared/sysfs}" && pwd)"
stage="$(mktemp -d)"
trap 'chmod -R u+w "$stage"; rm -rf "$stage"' EXIT
for m in "$src"/*/; do
  name="$(basename "$m")"
  [ -f "$m/EXPECTED.json" ] || continue
  cp -a "$m" "$stage/$name"
  chmod -R u+w "$stage/$name"
  # Link-shaped regular files -> symlinks.
  find "$stage/$name/sys/devices/system" -type f \
      \( -path '*/cpu/cpu[0-9]*/node[0-9]*' -o -path '*/node/node[0-9]*/cpu[0-9]*' \) |
    while read -r f; do
      target="$(cat "$f")"
      case "$target" in
        ../*) rm "$f"; ln -s "$target" "$f" ;;
      esac
    done
  tar --format=gnu --sort=name --mtime='@0' --owner=0 --group=0 --numeric-owner \
      --mode='u+rw,go+r,a+X' -C "$stage" -cf - "$name" | gzip -n -9 > "$here/$name.tar.gz"
  echo "packed $name"
done
