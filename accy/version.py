"""accy's version, in a module of its own: the package, pyproject.toml and the disk caches'
keys read it from here (a backend asking ``accy`` for it would import upwards)."""

__version__ = "0.2.0"
