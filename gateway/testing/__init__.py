"""Testing utilities shipped with the gateway: a scripted fake LLM provider.

``from gateway.testing import FakeProvider, Error, CutAfter`` -- see
:mod:`gateway.testing.fake_provider` for how to use it and
:mod:`gateway.testing.script` for the script steps. :class:`FakeVertex` and
:class:`FakeAzure` serve the same answers and steps on Google Vertex AI's and Azure
OpenAI's paths, with their credentials and errors (:mod:`gateway.testing.fake_vertex`,
:mod:`gateway.testing.fake_azure`); :class:`FakeGemini` speaks Google's Gemini API
(:mod:`gateway.testing.fake_gemini`). Each fake has a provider's prompt cache,
:class:`PromptCache` (:mod:`gateway.testing.prompt_cache`). ``serve --demo``'s built-in
provider is made of it (:mod:`gateway.testing.sim`).
"""

from gateway.testing.conversation import tokens_of
from gateway.testing.fake_azure import (
    FakeAzure,
    azure_content_filter,
    azure_filtered_answer,
    azure_rate_limit,
    azure_server_error,
)
from gateway.testing.fake_gemini import FakeGemini
from gateway.testing.fake_provider import DEFAULT_REPLY, FakeProvider, RecordedRequest
from gateway.testing.fake_vertex import FakeVertex, vertex_resource_exhausted, vertex_server_error
from gateway.testing.prompt_cache import PromptCache
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
    "FakeAzure",
    "FakeGemini",
    "FakeProvider",
    "FakeVertex",
    "Hang",
    "HeadersThenSilence",
    "MalformedEventAt",
    "NoDone",
    "PromptCache",
    "RecordedRequest",
    "Reset",
    "ScriptEntry",
    "SlowFirstByte",
    "StallAfter",
    "Step",
    "Success",
    "Tamper",
    "azure_content_filter",
    "azure_filtered_answer",
    "azure_rate_limit",
    "azure_server_error",
    "tokens_of",
    "vertex_resource_exhausted",
    "vertex_server_error",
]
