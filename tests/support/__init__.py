"""Shared test helpers (paths, ports, waiting, the sshd lab, the SGLang stand-in).

Import as ``from tests.support import ...`` (pyproject's pytest ``pythonpath`` holds the
checkout root and ``kernels/``).
"""
