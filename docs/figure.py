"""README's picture: the findings of the report that `acr-scan demo` writes, as headless Chromium draws it.

    python docs/figure.py [--workdir W] [--out docs/img/report.png] [--no-demo]

Runs `acr-scan demo --workdir W` (the tiny model is trained there once, then cached; about two minutes
on 2 CPU cores), screenshots W/demo-scan/report.html with `chromium --headless` in a 1000 x 2400 px window
and saves the rows --crop TOP,BOTTOM (the ACR histogram, the documents, where the passages lie; the run's
section above them names the model's folder on this machine) as a 64-colour palette PNG (a fraction of
the bytes, the text as legible).
--no-demo screenshots the report a demo already left in W.
Needs chromium (apt-get install -y chromium); CI has no browser, so the PNG is committed.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WIDTH, HEIGHT = 1000, 2400


def run(*args: str) -> str:
    done = subprocess.run(list(args), capture_output=True, text=True, timeout=1200, cwd=ROOT)
    if done.returncode:
        raise SystemExit(f"{' '.join(args[:4])} failed ({done.returncode}): {done.stderr[-2000:]}")
    return done.stdout


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--workdir", default=None, help="Where the demo trains its model (default: its cache).")
    parser.add_argument("--out", default=str(ROOT / "docs" / "img" / "report.png"))
    parser.add_argument("--crop", default="985,2150", help="TOP,BOTTOM: the rows of the page to keep.")
    parser.add_argument("--no-demo", action="store_true", help="Use the report the demo already wrote.")
    args = parser.parse_args()
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        raise SystemExit("chromium not found; install it (apt-get install -y chromium)")
    demo = [sys.executable, "-m", "scanner", "demo"] + (["--workdir", args.workdir] if args.workdir else [])
    if not args.no_demo:
        print(run(*demo))
    workdir = Path(args.workdir) if args.workdir else Path(run(sys.executable, "-c", (
        "from scanner.cli.demo import default_workdir; print(default_workdir())")).strip())
    report = (workdir / "demo-scan" / "report.html").resolve()
    from PIL import Image

    with tempfile.TemporaryDirectory() as tmp:
        raw = Path(tmp) / "shot.png"
        run(chromium, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
            f"--screenshot={raw}", f"--window-size={WIDTH},{HEIGHT}", report.as_uri())
        top, bottom = (int(x) for x in args.crop.split(","))
        with Image.open(raw) as image:
            image.crop((0, top, WIDTH, bottom)).convert("RGB").quantize(colors=64).save(args.out, optimize=True)
    print(f"wrote {args.out} from {report}")


if __name__ == "__main__":
    main()
