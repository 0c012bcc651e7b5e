"""Fixtures the cost tests share with others: loading a policy directory."""

from tests.policy.conftest import load  # noqa: F401  (a shared fixture)
