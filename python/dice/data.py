"""DI-engine's storage and model loaders (``ding.data``), on dice's loaders.

dice deviation: the loader runs as an actor of the node that uses it (made
when an exchanger takes it); ``start()`` and ``shutdown()`` are accepted and do
nothing, and a stored model keeps its version and time (DI-engine's
PeriodicalModelExchanger lost them).
"""

from . import _core


class _Loader(_core.Loader):
    def start(self):
        """Accepted for DI-engine's code; dice starts the loader itself."""

    def shutdown(self, timeout=None):
        """Accepted for DI-engine's code; dice stops the loader with its node."""


class FileStorageLoader(_Loader):
    """Stores a collector's context in files under ``dirname`` (or shared
    memory with ``shm=True``) and sends only a reference; each item is
    removed ``ttl`` seconds after it was stored."""

    def __init__(self, dirname, ttl=20, *, shm=False):
        super().__init__(str(dirname), float(ttl), False, shm)


class FileModelLoader(_Loader):
    """Stores model snapshots in files under ``dirname`` and sends only a
    reference. ``model`` is accepted for DI-engine's signature; the exchanger
    that takes the loader names the model."""

    def __init__(self, model=None, dirname="/tmp/dice-models", ttl=20, *,
                 shm=False):
        super().__init__(str(dirname), float(ttl), True, shm)


__all__ = ["FileStorageLoader", "FileModelLoader"]
