"""`python -m scanner.schema [FOLDER]`: write the generated copy of every schema (default: schemas/)."""

import logging
import sys

from scanner.schema.docs import write_schemas

if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    write_schemas(sys.argv[1] if len(sys.argv) > 1 else "schemas")
