"""The demo test shares the fleet tests' session-scoped SparkSession (one JVM for the whole run)."""

from tests.fleet.conftest import spark  # noqa: F401
