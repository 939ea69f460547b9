"""orchestrator: phase-gated deployment of a custom MLA verify-attention kernel into SGLang."""

__version__ = "0.1.0"
