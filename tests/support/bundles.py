"""Small bundles for transport and shipping tests, independent of the real ``kernels/``."""

from __future__ import annotations

from pathlib import Path

from orchestrator.bundle import Bundle, build_bundle


def bundle_from(src: Path, files: dict[str, str | bytes], manifest: str, out: Path) -> Bundle:
    """Write ``files`` (paths relative to ``src/kernels``) and ``kernels/MANIFEST`` under ``src``, then
    pack them with :func:`orchestrator.bundle.build_bundle` into ``out``."""
    base = src / "kernels"
    for rel, data in {**files, "MANIFEST": manifest}.items():
        path = base / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(data, bytes):
            path.write_bytes(data)
        else:
            path.write_text(data)
    return build_bundle(src, out)


def make_bundle(tmp: Path, marker: str = "v1") -> Bundle:
    """A tiny bundle under ``tmp/src-<marker>``: ``__init__.py`` (``VERSION = marker``), ``hello.py``
    (prints one JSON document with its argv) and ``csrc/k.cu``; tarballs in ``tmp/bundles``."""
    return bundle_from(
        tmp / f"src-{marker}",
        {
            "__init__.py": f'VERSION = "{marker}"\n',
            "hello.py": "import json, sys\nprint(json.dumps({'ok': True, 'argv': sys.argv[1:]}))\n",
            "csrc/k.cu": f"// kernel {marker}\n__global__ void k() {{}}\n",
        },
        "*.py\ncsrc/*.cu\n",
        tmp / "bundles",
    )
