#!/usr/bin/env bash
# Packs files into a one-layer docker-archive image tarball without Docker or a registry, for
# `ctr -n k8s.io images import FILE` on the test node:
#
#   pack-image.sh --name REF --out FILE.tar --entrypoint PATH [--cmd ARG]... [--user UID:GID]
#                 SRC:DEST [SRC:DEST...]
#
# Each SRC (a file, or a directory copied whole) goes to the absolute path DEST in a fresh
# rootfs; a dynamically linked ELF SRC brings the shared libraries and loader that ldd lists,
# at the paths ldd names (symlinks resolved). The rootfs also has /tmp (1777), /etc/passwd and
# /etc/group with root (0) and nonroot (65532), and a minimal /etc/nsswitch.conf. The layer
# tar is deterministic (sorted, mtime 0, owner 0:0). Prints FILE.tar's path on stdout.
set -euo pipefail
die() { echo "pack-image.sh: $*" >&2; exit 1; }
usage() { echo usage: >&2; sed -n "5,6s/^#//p" "${BASH_SOURCE[0]}" >&2; exit 2; }

name="" out="" entrypoint="" user="" cmd=() specs=()
while (($#)); do
    case "$1" in
    --name | --out | --entrypoint | --cmd | --user)
        (($# >= 2)) || die "$1 needs a value"
        case "$1" in
        --name) name="$2" ;; --out) out="$2" ;; --entrypoint) entrypoint="$2" ;;
        --cmd) cmd+=("$2") ;; --user) user="$2" ;;
        esac
        shift 2 ;;
    -h | --help) usage ;;
    -*) die "unknown option $1" ;;
    *) specs+=("$1"); shift ;;
    esac
done
[[ -n $name && -n $out && -n $entrypoint && ${#specs[@]} -gt 0 ]] || usage
[[ $entrypoint == /* ]] || die "--entrypoint $entrypoint is not an absolute path"
[[ -z $user || $user =~ ^[0-9]+(:[0-9]+)?$ ]] || die "--user $user is not UID[:GID]"
case "$(uname -m)" in
x86_64) arch=amd64 ;; aarch64) arch=arm64 ;; *) die "unsupported architecture $(uname -m)" ;;
esac
command -v python3 >/dev/null || die "python3 is needed to write the image's JSON"

umask 022
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
root="$work/rootfs"
mkdir -p "$root/etc" "$work/image"
install -d -m 1777 "$root/tmp"
printf '%s\n' 'root:x:0:0:root:/root:/sbin/nologin' \
    'nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin' >"$root/etc/passwd"
printf '%s\n' 'root:x:0:' 'nonroot:x:65532:' >"$root/etc/group"
printf '%s\n' 'passwd: files' 'group: files' 'hosts: files dns' >"$root/etc/nsswitch.conf"

# put SRC DEST: copies SRC (following symlinks, keeping modes) to DEST in the rootfs.
put() {
    mkdir -p "$root$(dirname "$2")"
    rm -rf "${root:?}$2"
    cp -RL --preserve=mode "$1" "$root$2"
}

# put_libs ELF: copies the shared libraries and the loader that ldd lists for ELF, if dynamic.
put_libs() {
    local out line lib
    if ! out="$(ldd "$1" 2>&1)"; then
        [[ $out == *"not a dynamic executable"* ]] && return 0
        die "ldd failed on $1: $out"
    fi
    while read -r line; do
        case "$line" in
        *"=> not found"*) die "$1 needs ${line%% *}, which ldd cannot find" ;;
        *"=> /"*) lib="${line#*=> }" ;;
        /*) lib="$line" ;; # the dynamic loader
        *) continue ;;     # linux-vdso.so.1, "statically linked"
        esac
        lib="${lib% (0x*)}"
        [[ -f $lib ]] || die "ldd names $lib for $1, which is not a file"
        put "$lib" "$lib"
    done <<<"$out"
}

for spec in "${specs[@]}"; do
    [[ $spec == *:* ]] || die "$spec is not SRC:DEST"
    src="${spec%:*}" dest="${spec##*:}"
    [[ -e $src ]] || die "SRC $src (in $spec) does not exist"
    [[ $dest == /?* ]] || die "DEST $dest (in $spec) is not an absolute path below /"
    put "$src" "$dest"
    if [[ -f $src && "$(head -c 4 "$src")" == $'\x7fELF' ]]; then
        put_libs "$src"
    fi
done
[[ -f $root$entrypoint && -x $root$entrypoint ]] ||
    die "--entrypoint $entrypoint is not an executable file in the image (give it as a DEST)"

tar_opts=(--sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner)
tar -C "$root" "${tar_opts[@]}" -cf "$work/layer.tar" .
diff_id="$(sha256sum "$work/layer.tar" | cut -d' ' -f1)"
mkdir "$work/image/$diff_id"
mv "$work/layer.tar" "$work/image/$diff_id/layer.tar"
config_sha="$(python3 - "$work/image" "$arch" "$diff_id" "$name" "$entrypoint" "$user" "${cmd[@]}" <<'PY'
import hashlib, json, sys
image, arch, diff_id, name, entrypoint, user, *cmd = sys.argv[1:]
config = {"Entrypoint": [entrypoint], "Env": ["PATH=/usr/local/bin:/usr/bin:/bin"]}
if cmd:
    config["Cmd"] = cmd
if user:
    config["User"] = user
data = json.dumps({"architecture": arch, "os": "linux", "created": "1970-01-01T00:00:00Z",
                   "config": config,
                   "rootfs": {"type": "layers", "diff_ids": ["sha256:" + diff_id]}},
                  sort_keys=True).encode()
sha = hashlib.sha256(data).hexdigest()
with open(f"{image}/{sha}.json", "wb") as f:
    f.write(data)
with open(f"{image}/manifest.json", "w") as f:
    json.dump([{"Config": f"{sha}.json", "RepoTags": [name],
                "Layers": [f"{diff_id}/layer.tar"]}], f)
print(sha)
PY
)"
mkdir -p "$(dirname "$out")"
tar -C "$work/image" "${tar_opts[@]}" -cf "$out.tmp" manifest.json "$config_sha.json" "$diff_id/layer.tar"
mv "$out.tmp" "$out"
echo "$(cd "$(dirname "$out")" && pwd)/$(basename "$out")"
