"""acr-scanner: measure LLM memorization with the Adversarial Compression Ratio."""

__version__ = "0.1.0"
