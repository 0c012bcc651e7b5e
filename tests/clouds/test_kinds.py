"""How each cloud kind is called: the URL of a request for a model, the body it takes, the
headers of its static key, and the shape its errors are read in (pure: no I/O)."""

from __future__ import annotations

import orjson
import pytest

from gateway.formats import CHAT, GEMINI, MESSAGES, RESPONSES
from gateway.formats.endpoints import Endpoint
from gateway.policy.schema import Provider
from gateway.providers import serves, speaks, wiring_of
from gateway.providers.kinds import cloud_of, counts, formats_of, native_paths

pytestmark = pytest.mark.fast

BEDROCK = Provider(api="bedrock", region="us-east-1")
VERTEX = Provider(api="vertex", project="acme-ml", region="europe-west1")
AZURE = Provider(api="azure", base_url="https://acme-eu.openai.azure.com/")
GOOGLE_AI = Provider(api="gemini", api_key_env="GEMINI_API_KEY")
GEMINI_BODY = {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}
MESSAGES_BODY = {"model": "claude", "max_tokens": 10, "stream": True, "messages": []}


def test_bedrock_invokes_an_anthropic_model_with_its_own_body() -> None:
    """Bedrock: InvokeModel at the region's endpoint, the model id escaped in the path, the
    Messages body without model or stream and with Bedrock's anthropic_version and the
    client's betas."""
    cloud = cloud_of(BEDROCK, "")
    model = "us.anthropic.claude-sonnet-4-5-20250929-v1:0"
    url, body = cloud.call("/v1/messages", MESSAGES, model, MESSAGES_BODY, True, "a-1, b-2")
    assert str(url) == (
        "https://bedrock-runtime.us-east-1.amazonaws.com/model/"
        "us.anthropic.claude-sonnet-4-5-20250929-v1%3A0/invoke-with-response-stream"
    )
    assert body == {
        "max_tokens": 10,
        "messages": [],
        "anthropic_version": "bedrock-2023-05-31",
        "anthropic_beta": ["a-1", "b-2"],
    }
    url, body = cloud.call("/v1/messages", MESSAGES, model, MESSAGES_BODY, False, None)
    assert url.path.endswith("%3A0/invoke") or url.raw_path.endswith("%3A0/invoke")
    assert "anthropic_beta" not in body
    assert cloud.eventstream(MESSAGES, True) and not cloud.eventstream(MESSAGES, False)
    assert MESSAGES_BODY["model"] == "claude"  # the caller's body is not changed


def test_bedrock_other_models_go_by_converse_at_a_given_base_url() -> None:
    """A non-Anthropic Bedrock model is called by Converse (ConverseStream for streams);
    base_url replaces the regional endpoint."""
    cloud = cloud_of(BEDROCK, "http://127.0.0.1:9/")
    converse = formats_of("bedrock", "amazon.nova-pro-v1:0", None, ("chat",))[0]
    url, body = cloud.call(
        "", converse, "amazon.nova-pro-v1:0", {"model": "x", "messages": []}, True, None
    )
    assert str(url) == "http://127.0.0.1:9/model/amazon.nova-pro-v1%3A0/converse-stream"
    assert body == {"messages": []}


def test_vertex_calls_claude_by_raw_predict_and_others_by_the_openai_endpoint() -> None:
    """Vertex: Claude by rawPredict / streamRawPredict in the project and region, with
    Vertex's anthropic_version and no model; other models by the OpenAI-compatible chat
    completions endpoint, the model in the body; the global location's host."""
    cloud = cloud_of(VERTEX, "")
    url, body = cloud.call(
        "/v1/messages", MESSAGES, "claude-sonnet-4-5@20250929", MESSAGES_BODY, True, None
    )
    assert str(url) == (
        "https://europe-west1-aiplatform.googleapis.com/v1/projects/acme-ml/locations/"
        "europe-west1/publishers/anthropic/models/claude-sonnet-4-5@20250929:streamRawPredict"
    )
    assert body["anthropic_version"] == "vertex-2023-10-16" and "model" not in body
    assert body["stream"] is True
    url, body = cloud.call(
        "/v1/chat/completions", CHAT, "google/gemini-2.0-flash", {"model": "g"}, False, None
    )
    assert str(url).endswith("/locations/europe-west1/endpoints/openapi/chat/completions")
    assert body == {"model": "google/gemini-2.0-flash"}
    glob = cloud_of(VERTEX.model_copy(update={"region": "global"}), "")
    url, _ = glob.call("/v1/messages", MESSAGES, "claude-x", {}, False, None)
    assert str(url).startswith(
        "https://aiplatform.googleapis.com/v1/projects/acme-ml/locations/global/"
    )
    assert cloud.passes_beta()


def test_vertex_calls_gemini_natively_and_counts_with_count_tokens() -> None:
    """Vertex: a Gemini model by its own generateContent (streamGenerateContent in SSE for
    a stream) in the project and region, the body as written; its count by countTokens,
    with only the fields countTokens takes."""
    cloud = cloud_of(VERTEX, "")
    url, body = cloud.call("", GEMINI, "gemini-2.5-pro", GEMINI_BODY, True, None)
    assert str(url) == (
        "https://europe-west1-aiplatform.googleapis.com/v1/projects/acme-ml/locations/"
        "europe-west1/publishers/google/models/gemini-2.5-pro:streamGenerateContent?alt=sse"
    )
    assert body is GEMINI_BODY
    url, _ = cloud.call("", GEMINI, "gemini-2.5-pro", GEMINI_BODY, False, None)
    assert url.path.endswith("/publishers/google/models/gemini-2.5-pro:generateContent")
    url, body = cloud.count("gemini-2.5-pro", GEMINI, {**GEMINI_BODY, "safetySettings": []}, None)
    assert url.path.endswith("/publishers/google/models/gemini-2.5-pro:countTokens")
    assert body == GEMINI_BODY


def test_google_ai_studio_takes_the_key_in_x_goog_api_key() -> None:
    """api gemini: AI Studio's endpoint unless base_url says, v1beta, the key as
    x-goog-api-key (never a bearer token); its count takes the whole request."""
    cloud = cloud_of(GOOGLE_AI, "")
    url, body = cloud.call("", GEMINI, "gemini-2.5-flash", GEMINI_BODY, True, None)
    assert str(url) == (
        "https://generativelanguage.googleapis.com/v1beta/models/gemini-2.5-flash"
        ":streamGenerateContent?alt=sse"
    )
    url, _ = cloud_of(GOOGLE_AI, "http://127.0.0.1:9/").call(
        "", GEMINI, "gemini-2.5-flash", GEMINI_BODY, False, None
    )
    assert str(url) == "http://127.0.0.1:9/v1beta/models/gemini-2.5-flash:generateContent"
    url, body = cloud.count("gemini-2.5-flash", GEMINI, GEMINI_BODY, None)
    assert url.path == "/v1beta/models/gemini-2.5-flash:countTokens"
    assert body == {"generateContentRequest": {"model": "models/gemini-2.5-flash", **GEMINI_BODY}}
    wiring = wiring_of(GOOGLE_AI, "", "g-key")
    assert wiring.headers["x-goog-api-key"] == "g-key" and "authorization" not in wiring.headers
    assert counts("gemini", GEMINI) and counts("vertex", GEMINI) and counts("vertex", MESSAGES)
    assert not counts("vertex", CHAT) and not counts("bedrock", GEMINI)


def test_azure_calls_the_deployment_with_api_version_and_responses_on_v1() -> None:
    """Azure: chat completions, completions and embeddings at the deployment's path with
    api-version (the documented default when the policy gives none); Responses at
    /openai/v1/responses with the deployment named in the body; the key as api-key."""
    cloud = cloud_of(AZURE, AZURE.base_url)
    url, body = cloud.call(
        "/v1/chat/completions", CHAT, "gpt-4o-prod", {"model": "gpt-4o"}, True, None
    )
    assert str(url) == (
        "https://acme-eu.openai.azure.com/openai/deployments/gpt-4o-prod/chat/completions"
        "?api-version=2024-10-21"
    )
    assert body == {"model": "gpt-4o-prod"}
    url, _ = cloud.call("/v1/embeddings", CHAT, "emb", {}, False, None)
    assert url.path == "/openai/deployments/emb/embeddings"
    url, body = cloud.call(
        "/v1/responses", RESPONSES, "gpt-4o-prod", {"model": "gpt-4o"}, False, None
    )
    assert str(url) == "https://acme-eu.openai.azure.com/openai/v1/responses"
    assert body["model"] == "gpt-4o-prod"
    pinned = cloud_of(AZURE.model_copy(update={"api_version": "2025-01-01"}), AZURE.base_url)
    url, _ = pinned.call("/v1/chat/completions", CHAT, "d", {}, False, None)
    assert url.query["api-version"] == "2025-01-01"
    assert cloud.key_headers("k") == {"api-key": "k"}


def test_a_cloud_wiring_carries_the_key_header_or_the_credential() -> None:
    """A cloud provider's wiring: its key in its header when it has one (no credential
    then), else the credential; never the key's format header of a plain provider."""
    keyed = wiring_of(AZURE, AZURE.base_url, "secret", credential=object())  # type: ignore[arg-type]
    assert keyed.headers["api-key"] == "secret" and keyed.credential is None
    bedrock_key = wiring_of(BEDROCK, "", "br-key")
    assert bedrock_key.headers["authorization"] == "Bearer br-key"
    marker = object()
    signed = wiring_of(BEDROCK, "", None, credential=marker)  # type: ignore[arg-type]
    assert signed.credential is marker and "authorization" not in signed.headers


@pytest.mark.parametrize(
    ("api", "model", "chosen", "expected"),
    [
        ("bedrock", "anthropic.claude-3-5-haiku-20241022-v1:0", None, "messages"),
        (
            "bedrock",
            "arn:aws:bedrock:us-east-1:1:inference-profile/us.anthropic.claude-x",
            None,
            "messages",
        ),
        ("bedrock", "meta.llama3-70b-instruct-v1:0", None, "converse"),
        ("bedrock", "anthropic.claude-x", "converse", "converse"),
        ("vertex", "claude-sonnet-4-5@20250929", None, "messages"),
        ("vertex", "google/gemini-2.0-flash", None, "chat"),
        ("vertex", "meta/llama-3.3-70b-instruct-maas", None, "chat"),
        ("vertex", "gemini-2.5-pro", None, "gemini"),
        ("vertex", "gemini-2.5-pro", "chat", "chat"),
        ("vertex", "claude-sonnet-4-5", "gemini", "gemini"),
        ("gemini", "gemini-2.5-pro", None, "gemini"),
        ("vertex", "claude-via-openai", "chat", "chat"),
        ("azure", "gpt-4o-prod", None, "chat"),
        ("azure", "gpt-4o-prod", "responses", "responses"),
    ],
)
def test_the_format_of_a_cloud_deployment(
    api: str, model: str, chosen: str | None, expected: str
) -> None:
    """Each cloud deployment speaks the format its model is called by (Anthropic models in
    Messages, Gemini models natively, the others in Converse or chat), or the one its
    upstream_api chooses."""
    assert formats_of(api, model, chosen, ("chat",))[0].name == expected


def test_which_endpoints_a_cloud_serves_untranslated() -> None:
    """Bedrock and Vertex take no legacy completions or embeddings; Azure takes all four
    OpenAI endpoints as they are; conversations reach every kind (translated)."""
    assert not serves(BEDROCK, Endpoint.embeddings) and not serves(VERTEX, Endpoint.completions)
    assert serves(AZURE, Endpoint.embeddings) and speaks(AZURE, Endpoint.responses)
    assert serves(BEDROCK, Endpoint.chat) and not speaks(BEDROCK, Endpoint.chat)
    assert native_paths("vertex") == {"/v1/messages", "/v1/chat/completions"}


@pytest.mark.parametrize(
    ("header", "raw", "expected"),
    [
        (
            "ThrottlingException:http://internal.amazon.com/coral/com.amazon.bedrock/",
            b'{"message":"Too many requests, please wait before trying again."}',
            {
                "type": "ThrottlingException",
                "message": "Too many requests, please wait before trying again.",
            },
        ),
        (
            "",
            b'{"__type":"com.amazon#ValidationException","Message":"Input is too long"}',
            {"type": "ValidationException", "message": "Input is too long"},
        ),
        (
            "ModelNotReadyException",
            b"not json",
            {"type": "ModelNotReadyException", "message": "not json"},
        ),
    ],
)
def test_bedrock_errors_read_in_anthropics_shape(
    header: str, raw: bytes, expected: dict[str, str]
) -> None:
    """A Bedrock error (its exception named in x-amzn-errortype or __type) becomes
    Anthropic's error object with that name as its type."""
    cloud = cloud_of(BEDROCK, "")
    headers = {"x-amzn-errortype": header} if header else {}
    assert orjson.loads(cloud.error_body(headers, raw)) == {"type": "error", "error": expected}
    assert cloud_of(AZURE, AZURE.base_url).error_body(headers, raw) == raw  # others: as they are


def test_dialect_keeps_the_betas_each_cloud_takes() -> None:
    """Of the client's betas (spaces and empty items as clients write them), each cloud
    keeps the ones on its list, in order; the others are named ``anthropic-beta:<flag>``.
    With none kept there is no header; a body without system turns is the same object."""
    body = {"messages": [{"role": "user", "content": "Hi."}], "max_tokens": 5}
    header = "claude-code-20250219, effort-2025-11-24,,web-search-2025-03-05 "
    bedrock, vertex = cloud_of(BEDROCK, ""), cloud_of(VERTEX, "")
    got, beta, dropped = bedrock.dialect(body, header)
    assert got is body and beta == "effort-2025-11-24"
    assert dropped == [
        "anthropic-beta:claude-code-20250219",
        "anthropic-beta:web-search-2025-03-05",
    ]
    got, beta, dropped = vertex.dialect(body, header)
    assert beta == "web-search-2025-03-05"
    assert dropped == ["anthropic-beta:claude-code-20250219", "anthropic-beta:effort-2025-11-24"]
    assert bedrock.dialect(body, "claude-code-20250219")[1] is None
    assert bedrock.dialect(body, None) == (body, None, [])


@pytest.mark.parametrize(
    ("system", "turn", "folded", "dropped"),
    [
        # a string system and a string turn: two text blocks, in that order
        ("Be brief.", "Now in /srv.", [{"type": "text", "text": "Be brief."},
                                       {"type": "text", "text": "Now in /srv."}], []),
        # no system: the turn's text alone, as a block
        (None, "Now in /srv.", [{"type": "text", "text": "Now in /srv."}], []),
        # the client's blocks kept as they are (cache_control too); an image named, dropped
        ([{"type": "text", "text": "A", "cache_control": {"type": "ephemeral"}}],
         [{"type": "text", "text": "B", "cache_control": {"type": "ephemeral", "ttl": "1h"}},
          {"type": "image", "source": {"type": "url", "url": "https://x/y.png"}}],
         [{"type": "text", "text": "A", "cache_control": {"type": "ephemeral"}},
          {"type": "text", "text": "B", "cache_control": {"type": "ephemeral", "ttl": "1h"}}],
         ["system.image"]),
        # an empty turn folds nothing in: system as it was
        ("Be brief.", "", "Be brief.", []),
    ],
)  # fmt: skip
def test_dialect_folds_system_turns_into_system(
    system: object, turn: object, folded: object, dropped: list[str]
) -> None:
    """A ``role: system`` turn anywhere in ``messages`` goes to the end of ``system`` (as
    translation puts it); the other turns stay in order; the client's body is not changed."""
    messages = [{"role": "user", "content": "Hi."}, {"role": "system", "content": turn},
                {"role": "assistant", "content": "Hello."}]  # fmt: skip
    body = {"max_tokens": 5, "messages": messages} | ({"system": system} if system else {})
    got, _, names = cloud_of(VERTEX, "").dialect(body, None)
    assert [m["role"] for m in got["messages"]] == ["user", "assistant"]
    assert got.get("system") == folded and names == dropped
    assert body["messages"] is messages and len(messages) == 3
