"""What a stream event is (:class:`Kind`): the vocabulary of :mod:`gateway.formats.sse`,
in a module of its own so that the formats' stream rules (``gateway/formats/*_stream.py``)
can name it without loading the framing.

Pure: no I/O.
"""

from __future__ import annotations

import enum


class Kind(enum.Enum):
    data = "data"
    final = "final"  # the upstream's last meaningful event: the answer is complete
    error = "error"  # an in-band error event
    done = "done"  # data: [DONE]
    comment = "comment"
    malformed = "malformed"


# The members as plain names, for the per-event code: on Python 3.11 ``Kind.data`` goes
# through ``EnumType.__getattr__`` (about 0.12 µs a lookup; a stream event made several).
DATA, FINAL, ERROR, DONE, COMMENT, MALFORMED = (
    Kind.data, Kind.final, Kind.error, Kind.done, Kind.comment, Kind.malformed
)  # fmt: skip
