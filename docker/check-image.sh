#!/usr/bin/env bash
# Builds docker/Dockerfile.cpu for real and runs its default command (the demo) in it, on a machine
# that reaches Debian's and Python's package registries but no container registry: the base image
# is made with mmdebstrap (Debian bookworm, its Python 3.11 in a virtualenv at /usr/local, so that
# `python` and `pip` are where python:3.11-slim has them), imported with podman, the image built
# with buildah and run with podman. Root, Debian 12:
#   apt-get install --no-install-recommends mmdebstrap buildah podman runc uidmap
#   bash docker/check-image.sh                      # torch's CPU wheel from PyTorch's CPU index
#   TORCH_WHEELS=DIR bash docker/check-image.sh     # ... or from a folder holding its wheel
#   FRESH=1 bash docker/check-image.sh              # base and every layer made anew (for the figures)
# Prints the figures (base, build and demo seconds, image size) as one JSON line at the end; the
# figures in bench/cluster/RESULTS.md ("The CPU image") come from it. Exits non-zero when any step fails or
# the demo leaves no report.
set -euo pipefail
cd "$(dirname "$0")/.."

IMAGE=${IMAGE:-localhost/acr-scanner:cpu}
BASE=${BASE:-localhost/acr-base:bookworm-py311}
# crun (podman's default on Debian 12) fails on hybrid cgroup hosts; runc does not.
PODMAN=(podman --runtime runc)

for tool in mmdebstrap buildah podman runc; do
    command -v "$tool" >/dev/null || {
        echo "$tool not found; install: apt-get install --no-install-recommends mmdebstrap buildah podman runc uidmap" >&2
        exit 2
    }
done

now() { date +%s.%N; }
since() { python3 -c "import sys; print(round($(now) - $1, 1))"; }

# The base, made once: delete it (podman rmi "$BASE") to make it again. It trusts this host's CA
# bundle (CA_BUNDLE) for pip, so that a TLS-inspecting proxy the host trusts works inside the build.
CA_BUNDLE=${CA_BUNDLE:-/etc/ssl/certs/ca-certificates.crt}
cache=()
if [ -n "${FRESH:-}" ]; then
    "${PODMAN[@]}" rmi -f "$IMAGE" "$BASE" >/dev/null 2>&1 || true
    cache=(--no-cache)
fi
t0=$(now)
if ! "${PODMAN[@]}" image exists "$BASE"; then
    mmdebstrap --variant=minbase --include=python3,python3-venv,passwd,ca-certificates \
        --customize-hook='chroot "$1" python3 -m venv /usr/local' \
        --customize-hook="cp '$CA_BUNDLE' \"\$1/etc/ssl/host-ca.crt\"" \
        --customize-hook='printf "[global]\ncert = /etc/ssl/host-ca.crt\n" > "$1/etc/pip.conf"' \
        bookworm - | "${PODMAN[@]}" import --change 'CMD ["python"]' - "$BASE"
fi
base_s=$(since "$t0")

wheels=()
if [ -n "${TORCH_WHEELS:-}" ]; then
    wheels=(--volume "$(realpath "$TORCH_WHEELS"):/wheels:ro" --build-arg TORCH_WHEELS=/wheels)
fi
t0=$(now)
buildah bud --isolation chroot --layers "${cache[@]}" -f docker/Dockerfile.cpu \
    --build-arg BASE="$BASE" "${wheels[@]}" -t "$IMAGE" .
build_s=$(since "$t0")
size=$("${PODMAN[@]}" image inspect --format '{{.Size}}' "$IMAGE")

demo=$(mktemp -d)
trap 'rm -rf "$demo"' EXIT
chmod 777 "$demo"  # the image runs as the user acr (uid 1000)
t0=$(now)
# podman's default limits (about a million open files and processes) are more than runc may set on a
# host whose hard limits are lower, and on ours an nproc above kernel.pid_max is refused too.
files=$(ulimit -Hn); [ "$files" != unlimited ] || files=1048576
procs=$(cat /proc/sys/kernel/pid_max)
if [ "$(ulimit -Hu)" != unlimited ] && [ "$(ulimit -Hu)" -lt "$procs" ]; then procs=$(ulimit -Hu); fi
"${PODMAN[@]}" run --rm --ulimit "nofile=$files:$files" --ulimit "nproc=$procs:$procs" \
    -v "$demo:/demo" "$IMAGE" demo --workdir /demo
demo_s=$(since "$t0")

report=$(find "$demo" -name report.html -size +1k | head -1)
[ -n "$report" ] || { echo "the demo wrote no report.html under --workdir" >&2; ls -R "$demo" >&2; exit 1; }
flagged=$(find "$demo" -name flagged.jsonl | head -1)
echo "{\"load_average\": \"$(cut -d' ' -f1-3 /proc/loadavg)\", \"base_s\": $base_s, \"build_s\": $build_s, \"demo_s\": $demo_s, \"image_bytes\": $size," \
     "\"report_bytes\": $(stat -c %s "$report"), \"flagged_lines\": $(wc -l < "${flagged:-/dev/null}")}"
