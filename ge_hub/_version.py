"""ge-hub's version, at the bottom of the layers so that any module may report it
(`ge_hub.__version__` re-exports it)."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("ge-hub")
except PackageNotFoundError:  # running from a source tree that is not installed
    __version__ = "0.0.0+unknown"
