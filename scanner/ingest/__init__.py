"""`acr-scan ingest`: text folders, EPUB books and JSONL dumps into one Parquet corpus that `scan` reads.

sources.py resolves the SRC arguments, text.py / epub.py / jsonl.py read one file each into documents
(or skips with a reason), driver.py writes the corpus and the ingest log. The schema of the corpus is
scanner/schema.py's ingested_schema().
"""

from scanner.ingest.common import IngestConfig
from scanner.ingest.driver import IngestSummary, ingest

__all__ = ["IngestConfig", "IngestSummary", "ingest"]
