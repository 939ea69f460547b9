"""``python -m orchestrator`` runs the CLI; :func:`main` is also the console script's entry point.

A plain ``orchestrator status`` is answered without importing Typer (:mod:`orchestrator.fastpath`);
everything else, and every error, goes to :func:`orchestrator.cli.main`.
"""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> None:
    args = list(sys.argv[1:] if argv is None else argv)
    from orchestrator.fastpath import run_status_fast

    code = run_status_fast(args)
    if code is not None:
        sys.exit(code)
    from orchestrator.cli import main as cli_main

    cli_main(args)


if __name__ == "__main__":  # pragma: no cover - exercised through subprocess tests
    main()
