"""An engine from outside the package, as a third party writes one: it imports
``django_blamequeue`` and nothing of it imports this. A project names it only by its path::

    BLAMEQUEUE = {"BACKENDS": {"default": {"BACKEND": "tests.outside_engine.engine.Engine"}}}

It is the local backend under another class name; being a subclass of it, it takes the local
protocol's options, defaults and checks (``conf/engines.py``).
"""

from __future__ import annotations

from django_blamequeue.backends.database import DatabaseBackend


class Engine(DatabaseBackend):
    """The local backend's verbs, found through ``BACKEND``."""
