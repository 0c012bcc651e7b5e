"""Testing utilities shipped with the gateway: a scripted fake LLM provider.

``from gateway.testing import FakeProvider, Error, CutAfter`` -- see
:mod:`gateway.testing.fake_provider` for how to use it and
:mod:`gateway.testing.script` for the script steps.
"""

from gateway.testing.conversation import tokens_of
from gateway.testing.fake_provider import DEFAULT_REPLY, FakeProvider, RecordedRequest
from gateway.testing.script import (
    CutAfter,
    Delay,
    Error,
    ErrorEventAfter,
    Hang,
    HeadersThenSilence,
    MalformedEventAt,
    NoDone,
    Reset,
    ScriptEntry,
    SlowFirstByte,
    StallAfter,
    Step,
    Success,
    Tamper,
)

__all__ = [
    "DEFAULT_REPLY",
    "CutAfter",
    "Delay",
    "Error",
    "ErrorEventAfter",
    "FakeProvider",
    "Hang",
    "HeadersThenSilence",
    "MalformedEventAt",
    "NoDone",
    "RecordedRequest",
    "Reset",
    "ScriptEntry",
    "SlowFirstByte",
    "StallAfter",
    "Step",
    "Success",
    "Tamper",
    "tokens_of",
]
