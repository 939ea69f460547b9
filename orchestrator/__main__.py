"""``python -m orchestrator`` runs the CLI."""

from orchestrator.cli import main

if __name__ == "__main__":  # pragma: no cover - exercised through subprocess tests
    main()
