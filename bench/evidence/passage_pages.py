"""The report's page per passage in a real browser: a small scan of a corpus that holds what breaks pages
(a very long line, non-ASCII text, HTML), its report, and headless Chromium screenshots of the report and of
a passage page (issue 19 item 5). CI has no browser: tests/test_report_pages.py checks the HTML itself.

    python bench/evidence/passage_pages.py --work W [--model TINY_DIR] [--shots bench/evidence/passage-pages]

The corpus (W/corpus.parquet), two documents:
- doc 0, id `<b>Ἰλιάς</b> «livre» 東京`: French, Greek and Japanese, `<script>alert(1)</script>` and `<b>`
  in the text, then one line of about 3,000 characters (word salad, the tiny model's canary, an unbroken
  120-character run and salad again, no newline), then more markup;
- doc 1: unseen word salad.
--model: the tiny model's folder (scanner/studies/tiny.py; built there when absent, about 20 s). The scan
uses tests/test_scan_passages.py's CPU-sized settings; then `acr-scan report` and `chromium --headless
--screenshot` of W/report.html and of the first page in W/report-passages/ at 1200x1600, saved as
palette PNGs under --shots. Prints a JSON line: the pages written, whether each screenshot is wider than
the window (horizontal overflow, read by the browser: document.scrollWidth via --dump-dom), and the files.
"""

from __future__ import annotations

import argparse
import html
import json
import random
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from scanner.studies.tiny import CANARIES, build_tiny, salad  # noqa: E402

SCAN = ["--span-tokens", "12", "--stride", "2", "--context-tokens", "16", "--docs-per-shard", "2",
        "--min-match-rate", "0.95", "--certificate-min-match", "0.5", "--steps", "20", "--candidates", "64",
        "--top-k", "64", "--restarts", "0", "--max-candidates-per-doc", "3", "--extend-tokens", "40"]
DOC_ID = "<b>Ἰλιάς</b> «livre» 東京"
WIDTH, HEIGHT = 1200, 1600
# Reports the page's layout as the browser made it (widths, height, where the section `anchor` starts);
# the DOM dump carries it in the title.
PROBE = ("<script>var d=document.documentElement,a=document.getElementById('ANCHOR');document.title="
         "JSON.stringify({scroll_width:d.scrollWidth,window_width:window.innerWidth,height:d.scrollHeight,"
         "anchor_top:a?Math.round(a.getBoundingClientRect().top):null})</script>")


def corpus_texts(rng: random.Random) -> list[str]:
    """The markup and the non-ASCII text stand within the report's window (1,200 characters) of the canary,
    far enough (40 words) not to be in the 16 tokens of context its certificate is drawn from."""
    opening = (f"{salad(rng, 30)}\nChapitre premier. Les élèves arrivèrent à l'école, déjà fatigués. «Où est-il ?» "
               "demanda Zoë.\nΜῆνιν ἄειδε θεὰ Πηληϊάδεω Ἀχιλῆος.\n東京の夜は静かだった。彼は本を閉じた。\n"
               "Markup in the book: <script>alert(1)</script> and <b>bold</b> & <i>so on</i>.\n")
    long_line = f"{salad(rng, 40)} {CANARIES[1]} {'ABCDEFGHIJ' * 12} {salad(rng, 400)}"
    closing = f"\n<img src=x onerror=alert(2)> Fin. Τέλος. 終わり。\n{salad(rng, 20)}"
    return [opening + long_line + closing, salad(rng, 40)]


def run(*args: str) -> subprocess.CompletedProcess:
    done = subprocess.run(list(args), capture_output=True, text=True, timeout=600, cwd=ROOT)
    if done.returncode:
        raise SystemExit(f"{args[:4]} failed ({done.returncode}): {done.stderr[-2000:]}")
    return done


def layout(html_file: Path, chromium: str, anchor: str) -> dict:
    """The page's layout in the browser, from a probe copy of it beside it (the page itself has no script;
    the copy adds one that reads the widths and where `anchor` starts)."""
    probe = html_file.parent / f"probe-{html_file.name}"
    probe.write_text(html_file.read_text(encoding="utf-8").replace("</body>", PROBE.replace("ANCHOR", anchor)
                                                                   + "</body>"), encoding="utf-8")
    dom = run(chromium, "--headless", "--no-sandbox", "--disable-gpu", f"--window-size={WIDTH},{HEIGHT}",
              "--dump-dom", probe.as_uri()).stdout
    probe.unlink()
    found = re.search(r"<title>(\{.*?\})</title>", dom)
    return json.loads(html.unescape(found.group(1))) if found else {}


def shoot(html_file: Path, stem: Path, chromium: str, anchor: str) -> dict:
    """Two 1200x1600 views of the page as palette PNGs: its top (STEM.png) and from the section `anchor`
    on (STEM-ANCHOR.png), cut from one screenshot of the whole page's height."""
    from PIL import Image

    seen = layout(html_file, chromium, anchor)
    height = min(max(seen.get("height") or HEIGHT, HEIGHT), 8000)
    raw = stem.with_suffix(".raw.png")
    run(chromium, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", f"--screenshot={raw}",
        f"--window-size={WIDTH},{height}", html_file.as_uri())
    top = max(0, min((seen.get("anchor_top") or 0) - 16, height - HEIGHT))
    with Image.open(raw) as image:  # palette PNGs: a fraction of the bytes, the text as legible
        for name, y in ((f"{stem.name}.png", 0), (f"{stem.name}-{anchor}.png", top)):
            image.crop((0, y, WIDTH, y + HEIGHT)).convert("RGB").quantize(colors=64).save(stem.parent / name,
                                                                                         optimize=True)
    raw.unlink()
    return seen


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--work", required=True, help="A folder for the corpus, the run and the report.")
    parser.add_argument("--model", default=None, help="The tiny model's folder (built when absent).")
    parser.add_argument("--shots", default=str(ROOT / "bench" / "evidence" / "passage-pages"), help="Where the PNGs go.")
    args = parser.parse_args()
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        raise SystemExit("chromium not found; install it (apt-get install -y chromium)")
    work, shots = Path(args.work).resolve(), Path(args.shots).resolve()
    work.mkdir(parents=True, exist_ok=True)
    shots.mkdir(parents=True, exist_ok=True)
    model = Path(args.model) if args.model else work / "tiny"
    build_tiny(model)
    texts = corpus_texts(random.Random(7))
    pq.write_table(pa.table({"id": [DOC_ID, "doc-1"], "text": texts}), work / "corpus.parquet")
    shutil.rmtree(work / "run", ignore_errors=True)
    python = [sys.executable, "-m", "scanner"]
    run(*python, "scan", str(work / "corpus.parquet"), "--model", str(model), "--out", str(work / "run"), *SCAN)
    run(*python, "report", str(work / "run"), "--out", str(work / "report.html"))
    pages = sorted((work / "report-passages").glob("*.html"))
    if not pages:
        raise SystemExit("the scan flagged no passage: nothing to show")
    report = shoot(work / "report.html", shots / "report", chromium, "passages")
    page = shoot(pages[0], shots / "passage", chromium, "output")
    print(json.dumps({"pages": len(pages), "report_layout": report, "page_layout": page,
                      "overflow": any(s.get("scroll_width", 0) > s.get("window_width", 0) for s in (report, page)),
                      "shots": {p.name: p.stat().st_size for p in sorted(shots.glob("*.png"))}}))


if __name__ == "__main__":
    main()
