"""oxide_batch: the durable job repository and operator console of a batch framework."""

from importlib.metadata import PackageNotFoundError, version

try:
    # The installed distribution's version (pyproject.toml), reported by the
    # capability descriptor (GET api/v1/descriptor) and in CHANGELOG.md.
    __version__ = version("oxide-batch")
except PackageNotFoundError:  # imported from a source tree that was never installed
    __version__ = "0+unknown"
