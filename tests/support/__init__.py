"""Shared test helpers, one place for each (import as ``from tests.support.<module> import ...``;
pyproject's pytest ``pythonpath`` holds the checkout root and ``kernels/``).

- ``paths``: ``REPO``, ``KERNELS``, ``copy_kernels`` (a frozen copy of kernels/ for a test's checkout),
  ``load_service_loader`` (the loader the stage step installs into the service python);
- ``net``: ``free_port``, ``wait_healthy`` (HTTP 200), ``wait_banner`` (a TCP server's first bytes);
- ``waiting``: ``wait_until`` (a condition, with a deadline);
- ``bundles``: ``make_bundle`` (a tiny bundle), ``bundle_from`` (files + MANIFEST, packed);
- ``sshd_lab``: the sshd lab on loopback (``running_lab`` and ``lab_factory`` for fixtures, ``lab_host``;
  shell ``up``/``down``);
- ``sglang_standin``: ``Standin``, the SGLang STAND-IN server (``sglang_standin_server.py``, its TP
  ranks' records in ``sglang_standin_ranks.py``) started through ``sglang_standin_launcher.py``, as an
  inventory's restart command runs it;
- ``cli``: the orchestrator CLI as a subprocess (``cli_env``, ``cli_argv``, ``run_cli_json``,
  ``popen_cli``) and readers of its ``run --json`` results (``host_results``, ``step_results``);
- ``tools``: ``run_tool``, a host tool run as the engine runs it (``python -m`` in kernels/, one JSON document).
"""
