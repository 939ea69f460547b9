"""The bundle is what runs on a host, and only that: the files under ``kernels/`` that match a
pattern of ``kernels/MANIFEST`` (orchestrator/bundle.py).

On a copy of this checkout's ``kernels/`` (plus its ``docs/``) in a temp folder:
- editing a docs or results file, or a ``.md`` inside ``kernels/``, leaves the bundle sha unchanged;
- editing a ``.cu`` source, a ``.py`` of a shipped package, or the manifest changes it;
- a file that matches no manifest pattern (notes, results, build outputs, caches) is not packed;
- without ``kernels/MANIFEST`` there is no bundle: a clear error naming the missing file (in
  ``bundle.py`` and through the CLI, which plans nothing).
"""

from __future__ import annotations

import fnmatch
import io
import shutil
import tarfile
from pathlib import Path

import pytest

from orchestrator import bundle
from tests.support.cli import cli_argv, cli_env, run_cli_json
from tests.support.paths import REPO, copy_kernels

#: Suffixes of files that document or record, never run: none of them is ever in the bundle.
NOT_CODE = (".md", ".json", ".png", ".txt", ".sh", ".ipynb", ".csv", ".log")


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    """A frozen copy of the real ``kernels/`` and ``docs/``; a ``.md`` note inside a kernel package."""
    root = tmp_path / "checkout"
    copy_kernels(root)
    shutil.copytree(REPO / "docs", root / "docs")
    (root / "kernels" / "mla_verify" / "NOTES.md").write_text("# lab notes\nmeasured 150x\n")
    return root


def packed_names(root: Path) -> list[str]:
    """Names of the entries of the tarball that :func:`bundle.pack_bytes` builds for ``root``."""
    data, count = bundle.pack_bytes(root)
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        names = tar.getnames()
    assert len(names) == count
    return names


def one_file(root: Path, pattern: str) -> Path:
    """The first file (sorted) under ``root`` matching ``pattern``; the test needs one to exist."""
    found = sorted(p for p in root.glob(pattern) if p.is_file() and "__pycache__" not in p.parts)
    assert found, f"no {pattern} under {root}: the checkout changed shape"
    return found[0]


def append(path: Path, text: str) -> None:
    path.write_text(path.read_text(errors="replace") + text)


@pytest.mark.parametrize(
    "edited",
    ["docs/**/*.md", "docs/results/*.json", "kernels/mla_verify/NOTES.md"],
    ids=["docs-page", "results-json", "md-inside-kernels"],
)
def test_editing_docs_results_or_notes_leaves_the_bundle_sha_unchanged(checkout, edited):
    before = bundle.bundle_sha(checkout)
    append(one_file(checkout, edited), "\nedited after the GPU run\n")
    assert bundle.bundle_sha(checkout) == before


@pytest.mark.parametrize(
    "edited",
    ["kernels/mla_verify/csrc/*.cu", "kernels/verify_tools/*.py", "kernels/cutover_agent/*.py", "kernels/MANIFEST"],
    ids=["cuda-source", "phase-tool", "cutover-agent", "manifest"],
)
def test_editing_code_that_runs_on_a_host_changes_the_bundle_sha(checkout, edited):
    before = bundle.bundle_sha(checkout)
    path = one_file(checkout, edited)
    append(path, "\n# changed\n" if path.suffix in (".py", "") else "\n// changed\n")
    assert bundle.bundle_sha(checkout) != before


def test_a_new_module_in_a_shipped_package_is_packed_and_changes_the_sha(checkout):
    before = bundle.bundle_sha(checkout)
    (checkout / "kernels" / "verify_tools" / "extra_tool.py").write_text("print('{}')\n")
    assert "verify_tools/extra_tool.py" in packed_names(checkout)
    assert bundle.bundle_sha(checkout) != before


def test_files_matching_no_manifest_pattern_are_not_packed(checkout):
    k = checkout / "kernels"
    strays = {
        "mla_verify/NOTES.md": "notes",
        "mla_verify/results_h200.json": "{}",
        "verify_tools/plot.png": "png",
        "kv_defrag/run_on_device.sh": "echo",
        "mla_verify/csrc/scratch.txt": "draft",
        "mla_verify/csrc/mla_verify.o": "object",
        "mla_verify/_ext.so": "library",
        "verify_tools/__pycache__/parity.cpython-312.pyc": "bytecode",
        "scratch/tool.py": "print(1)",  # a folder the manifest does not name
    }
    for rel, text in strays.items():
        (k / rel).parent.mkdir(parents=True, exist_ok=True)
        (k / rel).write_text(text)
    before = bundle.bundle_sha(checkout)
    names = packed_names(checkout)
    assert not set(strays) & set(names)
    for rel in strays:
        append(k / rel, " edited")
    assert bundle.bundle_sha(checkout) == before


def test_the_real_bundle_holds_only_manifest_files_and_no_docs_or_results():
    members = [p.as_posix() for p in bundle.bundle_members(REPO)]
    patterns = bundle.manifest_patterns(REPO)
    assert "MANIFEST" in members
    assert all(any(fnmatch.fnmatchcase(m, p) for p in patterns) for m in members)
    assert not [m for m in members if m.endswith(NOT_CODE)]
    # every tool package the phases run (``python -m <package>...``) is in it, relative to kernels/
    for package in ("mla_verify", "verify_tools", "sglang_verify_plugin", "kv_defrag", "cutover_agent"):
        assert f"{package}/__init__.py" in members or f"{package}/__main__.py" in members, package
    assert any(m.startswith("mla_verify/csrc/") and m.endswith(".cu") for m in members)


def test_the_same_sources_copied_twice_give_the_same_sha(tmp_path, checkout):
    again = tmp_path / "again"
    copy_kernels(again)
    (again / "kernels" / "mla_verify" / "NOTES.md").write_text("other notes\n")
    assert bundle.bundle_sha(again) == bundle.bundle_sha(checkout)


def test_a_missing_manifest_is_a_clear_error_naming_the_file(checkout):
    (checkout / "kernels" / "MANIFEST").unlink()
    with pytest.raises(bundle.BundleError, match=r"kernels/MANIFEST: cannot read the bundle manifest"):
        bundle.bundle_sha(checkout)


def test_the_cli_names_the_missing_manifest_and_plans_nothing(checkout, tmp_path):
    (checkout / "kernels" / "MANIFEST").unlink()
    env = cli_env(checkout, REPO / "phases")
    argv = cli_argv(
        "run", "0", "--dry-run", "--json", "--inventory", str(REPO / "inventory" / "example-blackwell.yaml")
    )
    code, doc = run_cli_json([*argv, "--state-dir", str(tmp_path / "state")], env=env, cwd=tmp_path, timeout=120)
    assert (code, doc["plan"]) == (1, None)
    [err] = doc["errors"]
    assert err["code"] == "BUNDLE" and err["message"].startswith(f"{checkout / 'kernels' / 'MANIFEST'}: ")
