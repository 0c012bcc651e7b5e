"""Fixtures the cloud tests share with others: the OTLP collector of the tracing tests."""

from tests.integration.test_tracing import collector  # noqa: F401  (a shared fixture)
