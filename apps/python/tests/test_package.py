"""test_package.py: the package's version and build facts against the project
(CMakeLists.txt, pyproject.toml) and `ringvit --version`; the library search and
its error; `pip install` of apps/python into a folder, imported from there."""

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import LIB, PKG_DIR, REPO, run_cli

import ringvit


def _cmake_version():
    text = (REPO / "CMakeLists.txt").read_text()
    m = re.search(r"project\(\s*ringvit\s+VERSION\s+([0-9.]+)", text)
    assert m, "no project(ringvit VERSION x.y.z) in CMakeLists.txt"
    return m.group(1)


def _pyproject_version():
    m = re.search(r'(?m)^version\s*=\s*"([^"]+)"', (PKG_DIR / "pyproject.toml").read_text())
    assert m, "no static version in pyproject.toml"
    return m.group(1)


def test_versions_agree():
    v = _cmake_version()
    assert _pyproject_version() == v
    assert ringvit.__version__ == v
    out = run_cli("--version").stdout
    assert out.splitlines()[0] == f"ringvit {v}"
    info = ringvit.build_info()
    assert info["version"] == v
    # the library states its build as the command does, word for word
    assert info["text"].rstrip("\n") == out.rstrip("\n")
    for line in out.splitlines()[1:]:
        key, _, value = line.partition(": ")
        assert info[key.replace(" ", "_")] == value
    assert Path(info["library"]).resolve() == LIB.resolve()


def _run_py(code, env_extra, cwd):
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    env.update(env_extra)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=env, cwd=cwd)


def test_library_search_error_lists_places(tmp_path):
    # a RINGVIT_LIB that does not exist: the error names it
    r = _run_py("import ringvit\ntry:\n ringvit.probe('x')\nexcept ringvit.LibraryNotFoundError"
                " as e:\n print('ERR', e)\n", {"RINGVIT_LIB": str(tmp_path / "nope.so"),
                                                "PYTHONPATH": str(PKG_DIR)}, tmp_path)
    assert r.returncode == 0, r.stderr
    assert "ERR ringvit: cannot load libringvit" in r.stdout
    assert str(tmp_path / "nope.so") in r.stdout and "no such file" in r.stdout
    # a folder: libringvit.so inside it
    r = _run_py("import ringvit; print(ringvit.library_path())",
                {"RINGVIT_LIB": str(LIB.parent), "PYTHONPATH": str(PKG_DIR)}, tmp_path)
    assert r.returncode == 0, r.stderr
    assert Path(r.stdout.strip()).resolve() == LIB.resolve()


def test_pip_install_target(tmp_path):
    """pip installs the package into a folder; imported from there (not the source
    tree) it finds the library through RINGVIT_LIB and works."""
    assert subprocess.run([sys.executable, "-m", "pip", "--version"],
                          capture_output=True).returncode == 0, \
        "pip is not installed for this python (scripts/install-deps.sh installs python3-pip)"
    src = tmp_path / "src"  # a copy: the build writes build/ and egg-info beside the sources
    shutil.copytree(PKG_DIR, src, ignore=shutil.ignore_patterns(
        "__pycache__", "*.egg-info", "build", ".pytest_cache", "tests", "examples"))
    target = tmp_path / "site"
    r = subprocess.run([sys.executable, "-m", "pip", "install", "--no-build-isolation",
                        "--no-deps", "--no-index", "--quiet", "--disable-pip-version-check",
                        "--target", str(target), str(src)], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    assert (target / "ringvit" / "__init__.py").is_file()
    code = ("import ringvit, json; print(ringvit.__file__); "
            "print(json.dumps([ringvit.__version__, ringvit.build_info()['version']]))")
    r = _run_py(code, {"PYTHONPATH": str(target), "RINGVIT_LIB": str(LIB)}, tmp_path)
    assert r.returncode == 0, r.stderr
    where, versions = r.stdout.splitlines()
    assert Path(where).resolve().is_relative_to(target.resolve())
    assert versions == f'["{ringvit.__version__}", "{ringvit.__version__}"]'


def test_pip_install_prefix_finds_library(tmp_path):
    """Installed with --prefix P beside the library in P/lib (as `cmake --install
    --prefix P` puts it), the package finds it without RINGVIT_LIB."""
    assert subprocess.run([sys.executable, "-m", "pip", "--version"],
                          capture_output=True).returncode == 0, \
        "pip is not installed for this python (scripts/install-deps.sh installs python3-pip)"
    src = tmp_path / "src"
    shutil.copytree(PKG_DIR, src, ignore=shutil.ignore_patterns(
        "__pycache__", "*.egg-info", "build", ".pytest_cache", "tests", "examples"))
    prefix = tmp_path / "prefix"
    (prefix / "lib").mkdir(parents=True)
    shutil.copy(LIB, prefix / "lib" / "libringvit.so.0")
    r = subprocess.run([sys.executable, "-m", "pip", "install", "--no-build-isolation",
                        "--no-deps", "--no-index", "--quiet", "--disable-pip-version-check",
                        "--prefix", str(prefix), str(src)], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    inits = list(prefix.glob("**/ringvit/__init__.py"))
    assert len(inits) == 1, inits
    env = {"PYTHONPATH": str(inits[0].parents[1])}
    code = "import ringvit; print(ringvit.library_path()); print(ringvit.build_info()['version'])"
    saved = os.environ.pop("RINGVIT_LIB")
    try:
        r = _run_py(code, env, tmp_path)
    finally:
        os.environ["RINGVIT_LIB"] = saved
    assert r.returncode == 0, r.stderr
    where, version = r.stdout.splitlines()
    assert Path(where) == prefix / "lib" / "libringvit.so.0" and version == ringvit.__version__
