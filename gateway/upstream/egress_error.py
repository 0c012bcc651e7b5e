"""The one error of the egress modules (:mod:`gateway.upstream.egress` and the modules it uses)."""

from __future__ import annotations


class EgressError(ValueError):
    """The environment or a certificate file does not allow reaching a provider.

    The message never holds a proxy's credentials.
    """
