"""The deployment settings a test must not inherit from the machine running it.

A support module, not a test module: test modules import it (they never import each other).
"""
from __future__ import annotations

ENVIRONMENT = ("PERCEPTLAB_INSTANCE", "PERCEPTLAB_DATABASE_URL", "PERCEPTLAB_SECRET_KEY", "PERCEPTLAB_CONFIG",
               "PERCEPTLAB_SERVER_INSTANCE_PATH", "PERCEPTLAB_SERVER_DATABASE_URL")
