"""The release, in one place: the package, its build (pyproject.toml), the command line
and the self-check read it here."""

__version__ = "0.2.0"
