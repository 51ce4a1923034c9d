"""_version.py: the package version, the project's (CMakeLists.txt project VERSION,
pyproject.toml version; tests/test_package.py checks all three agree)."""

__version__ = "0.1.0"
