"""acr-scanner: measure LLM memorization with the Adversarial Compression Ratio.

`scanner.measure(texts, model=...)` and `scanner.scan(corpus, out, model=...)` are the Python API
(scanner/api.py, docs/api.md). They are loaded on first use, so `import scanner` stays as cheap as the
command line's start needs (no torch, no pyarrow)."""

__version__ = "0.1.0"

API = ("measure", "measure_iter", "scan", "saved_config", "ScanResult")
__all__ = ["__version__", *API]


def __getattr__(name: str):
    # PEP 562: the API module is imported when one of its names is first asked for.
    if name in API:
        from scanner import api

        return getattr(api, name)
    raise AttributeError(f"module 'scanner' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *API})
