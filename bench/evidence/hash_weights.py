"""What recording the model's identity costs a scan: sha256 of a GB-scale weight file, streamed.

Writes FILE (--gb GB of random bytes; deleted after unless --keep), hashes it with the scan's own
function (scanner.engine.identity.sha256_file: 4 MiB reads into one reused buffer), twice: the first
read right after writing (the page cache holds what fits in memory), the second after asking the
kernel to drop the file's pages (posix_fadvise DONTNEED: a read from the disk, as a model that was not
just written is read). Prints one JSON object with GB/s and the extrapolation to an 8B model in bf16
(16 GB of weights) on one machine.

    python bench/evidence/hash_weights.py [--gb 3] [--file /tmp/acr-hash-bench.bin]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from datetime import UTC, datetime
from pathlib import Path

from scanner.engine.identity import sha256_file

BLOCK = 64 << 20
EIGHT_B_BF16_GB = 16.06  # 8.03e9 parameters x 2 bytes (Llama-3.1-8B)


def write_random(path: Path, gb: float) -> None:
    left = int(gb * 1e9)
    with open(path, "wb") as f:
        while left:
            f.write(os.urandom(min(BLOCK, left)))
            left -= min(BLOCK, left)
        f.flush()
        os.fsync(f.fileno())


def timed_hash(path: Path, cold: bool) -> float:
    if cold:
        with open(path, "rb") as f:
            os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
    start = time.perf_counter()
    sha256_file(path)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gb", type=float, default=3.0)
    parser.add_argument("--file", default="/tmp/acr-hash-bench.bin")
    parser.add_argument("--keep", action="store_true")
    args = parser.parse_args()
    path = Path(args.file)
    try:
        write_random(path, args.gb)
        size = path.stat().st_size / 1e9
        warm, cold = timed_hash(path, cold=False), timed_hash(path, cold=True)
    finally:
        if not args.keep:
            path.unlink(missing_ok=True)
    rates = {"warm_gb_per_s": round(size / warm, 3), "cold_gb_per_s": round(size / cold, 3)}
    print(json.dumps({"date": datetime.now(UTC).date().isoformat(), "machine": platform.machine(),
                      "cpus": os.cpu_count(), "file_gb": round(size, 3), "warm_s": round(warm, 2),
                      "cold_s": round(cold, 2), **rates,
                      "eight_b_bf16_s": {k.removesuffix("_gb_per_s"): round(EIGHT_B_BF16_GB / v, 1)
                                         for k, v in rates.items()}}, indent=1))


if __name__ == "__main__":
    main()
