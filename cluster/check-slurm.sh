#!/usr/bin/env bash
# Runs cluster/slurm.sbatch for real, as a user would submit it, on a one-node Slurm cluster on this
# machine (cluster/slurm-local.sh): a scan on the job's own Ray, then the same job requeued mid-scan
# whose table must equal the uninterrupted one (tests/test_slurm.py, about five minutes on 2 cores).
# Not part of .ci/run (CI would need Slurm installed and five more minutes); run it after editing
# slurm.sbatch or slurm-local.sh. Debian 12, as root (it installs Slurm with apt-get when missing):
#   bash cluster/check-slurm.sh
#   PYTHON=/path/to/venv/bin/python bash cluster/check-slurm.sh    # default: .venv/bin/python
# The figures (seconds, rows) are written to $ACR_SLURM_FIGURES (default bench/cluster/slurm-local.json).
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-.venv/bin/python}
PACKAGES=(slurmctld slurmd slurm-client munge)
if ! command -v slurmctld >/dev/null || ! command -v sbatch >/dev/null || ! command -v munged >/dev/null; then
    if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
        echo "Slurm is not installed; as root: apt-get install --no-install-recommends ${PACKAGES[*]}" >&2
        exit 2
    fi
    apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${PACKAGES[@]}"
fi
ACR_SLURM_FIGURES=${ACR_SLURM_FIGURES:-bench/cluster/slurm-local.json} \
    "$PYTHON" -m pytest -q -n0 -m slow -s -p no:cacheprovider tests/test_slurm.py
