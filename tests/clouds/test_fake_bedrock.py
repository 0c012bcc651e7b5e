"""The fake Bedrock is what AWS's own SDK accepts: signatures, bodies, streams and errors
(gateway/testing/fake_bedrock.py), driven by botocore's real client and raw requests."""

from __future__ import annotations

import asyncio
import io
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import aiohttp
import botocore.session
import pytest
from awscrt.auth import AwsCredentialsProvider, AwsSigningConfig, aws_sign_request
from awscrt.http import HttpHeaders, HttpRequest
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.config import Config
from botocore.credentials import Credentials
from botocore.exceptions import ClientError, EventStreamError
from yarl import URL

from gateway.formats.eventstream import EventStreamSplitter
from gateway.testing import CutAfter, MalformedEventAt, Success
from gateway.testing.bedrock_errors import BedrockError
from gateway.testing.fake_bedrock import FakeBedrock, stream_exception

MODEL = "us.anthropic.claude-sonnet-4-5-20250929-v1:0"
PATH = "/model/us.anthropic.claude-sonnet-4-5-20250929-v1%3A0"
NOVA = "amazon.nova-pro-v1:0"
REGION = "us-east-1"
INVOKE = {"anthropic_version": "bedrock-2023-05-31", "max_tokens": 200,
          "messages": [{"role": "user", "content": "Say hello."}]}  # fmt: skip
WEATHER = {"toolSpec": {"name": "get_weather", "description": "The weather in a city.",
           "inputSchema": {"json": {"type": "object",
                                    "properties": {"city": {"type": "string"}}}}}}  # fmt: skip


#: The SDK clients a test made, closed (with their connections) when it ends.
_CLIENTS: list[Any] = []


@pytest.fixture
async def fake() -> AsyncIterator[FakeBedrock]:
    async with FakeBedrock(region=REGION) as f:
        yield f
        while _CLIENTS:
            _CLIENTS.pop().close()


def client(fake: FakeBedrock, **creds: Any) -> Any:
    """botocore's own bedrock-runtime client on the fake, no retries."""
    keys = {"aws_access_key_id": fake.access_key, "aws_secret_access_key": fake.secret_key}
    c = botocore.session.get_session().create_client(
        "bedrock-runtime",
        region_name=creds.pop("region", REGION),
        endpoint_url=fake.url,
        config=Config(retries={"total_max_attempts": 1}),
        **{**keys, **creds},
    )
    _CLIENTS.append(c)
    return c


async def call(fn: Callable[..., Any], **kwargs: Any) -> Any:
    """A blocking SDK call, off the loop that serves the fake."""
    return await asyncio.to_thread(fn, **kwargs)


async def test_invoke_model_answers_anthropic_json(fake: FakeBedrock) -> None:
    """InvokeModel, signed by botocore, gets Anthropic's message; the request is recorded
    with the model id URL-encoded in its path and decoded as its model."""
    c = client(fake)
    r = await call(c.invoke_model, modelId=MODEL, body=json.dumps(INVOKE))
    answer = json.loads(r["body"].read())
    assert answer["type"] == "message" and answer["stop_reason"] == "end_turn"
    assert answer["content"][0]["text"].startswith("Hello! This is the fake provider")
    (req,) = fake.requests
    assert req.path == PATH + "/invoke" and req.model == MODEL
    assert req.headers["authorization"].startswith(
        f"AWS4-HMAC-SHA256 Credential={fake.access_key}/"
    )
    assert req.body["anthropic_version"] == "bedrock-2023-05-31"


async def test_invoke_stream_is_event_stream_of_anthropic_events(fake: FakeBedrock) -> None:
    """InvokeModelWithResponseStream parses in botocore as chunk events wrapping Anthropic's
    stream events; the last message_stop carries Bedrock's invocation metrics."""
    c = client(fake)
    r = await call(c.invoke_model_with_response_stream, modelId=MODEL, body=json.dumps(INVOKE))

    def events() -> list[dict[str, Any]]:
        return [json.loads(e["chunk"]["bytes"]) for e in r["body"]]

    got = await asyncio.to_thread(events)
    types = [e["type"] for e in got]
    assert types[0] == "message_start" and types[-1] == "message_stop"
    text = "".join(e["delta"].get("text", "") for e in got if e["type"] == "content_block_delta")
    assert text.startswith("Hello! This is the fake provider")
    assert got[-1]["amazon-bedrock-invocationMetrics"]["outputTokenCount"] > 0
    assert r["ResponseMetadata"]["HTTPHeaders"]["content-type"] == (
        "application/vnd.amazon.eventstream"
    )


async def test_converse_answers_and_counts(fake: FakeBedrock) -> None:
    """Converse gets the output message, stop reason, usage and metrics."""
    c = client(fake)
    r = await call(c.converse, modelId=NOVA, system=[{"text": "Be brief."}],
                   messages=[{"role": "user", "content": [{"text": "Say hello."}]}],
                   inferenceConfig={"maxTokens": 100})  # fmt: skip
    assert r["output"]["message"]["content"][0]["text"].startswith("Hello!")
    assert r["stopReason"] == "end_turn"
    usage = r["usage"]
    assert usage["totalTokens"] == usage["inputTokens"] + usage["outputTokens"] > 0
    assert r["metrics"]["latencyMs"] == fake.latency_ms
    assert fake.requests[0].body["system"] == [{"text": "Be brief."}]


async def test_converse_tool_use_and_max_tokens(fake: FakeBedrock) -> None:
    """A user turn naming an offered tool gets a toolUse block (stop tool_use); a small
    maxTokens cuts the text (stop max_tokens)."""
    c = client(fake)
    r = await call(c.converse, modelId=NOVA, toolConfig={"tools": [WEATHER]},
                   messages=[{"role": "user", "content": [{"text": "Use get_weather for Oslo"}]}])  # fmt: skip
    use = r["output"]["message"]["content"][0]["toolUse"]
    assert use["name"] == "get_weather" and use["input"] == {"city": "fake city"}
    assert r["stopReason"] == "tool_use"
    r = await call(c.converse, modelId=NOVA, inferenceConfig={"maxTokens": 2},
                   messages=[{"role": "user", "content": [{"text": "Say hello."}]}])  # fmt: skip
    assert r["stopReason"] == "max_tokens"
    assert len(r["output"]["message"]["content"][0]["text"]) == 8


async def test_converse_stream_events(fake: FakeBedrock) -> None:
    """ConverseStream parses in botocore: start, tool-use start, input deltas, stop, metadata."""
    c = client(fake)
    r = await call(c.converse_stream, modelId=NOVA, toolConfig={"tools": [WEATHER]},
                   messages=[{"role": "user", "content": [{"text": "get_weather please"}]}])  # fmt: skip
    got = await asyncio.to_thread(lambda: list(r["stream"]))
    kinds = [next(iter(e)) for e in got]
    assert kinds[0] == "messageStart" and kinds[1] == "contentBlockStart"
    assert kinds[-3:] == ["contentBlockStop", "messageStop", "metadata"]
    assert got[1]["contentBlockStart"]["start"]["toolUse"]["name"] == "get_weather"
    pieces = [
        e["contentBlockDelta"]["delta"]["toolUse"]["input"] for e in got if "contentBlockDelta" in e
    ]
    assert json.loads("".join(pieces)) == {"city": "fake city"}
    assert got[-2]["messageStop"]["stopReason"] == "tool_use"
    assert got[-1]["metadata"]["usage"]["outputTokens"] > 0


@pytest.mark.parametrize(
    ("step", "status", "code"),
    [
        (BedrockError.throttling(), 429, "ThrottlingException"),
        (BedrockError.service_quota(), 400, "ServiceQuotaExceededException"),
        (BedrockError.model_not_ready(), 429, "ModelNotReadyException"),
        (BedrockError.service_unavailable(), 503, "ServiceUnavailableException"),
        (BedrockError.internal(), 500, "InternalServerException"),
        (BedrockError.model_timeout(), 408, "ModelTimeoutException"),
        (BedrockError.input_too_long(), 400, "ValidationException"),
        (BedrockError.access_denied(), 403, "AccessDeniedException"),
    ],
)
async def test_scripted_errors_are_botocores_modelled_exceptions(
    fake: FakeBedrock, step: Any, status: int, code: str
) -> None:
    """Each scripted error reaches botocore as its modelled exception, with its status."""
    c = client(fake)
    fake.push(step, model=MODEL)
    with pytest.raises(ClientError) as e:
        await call(c.invoke_model, modelId=MODEL, body=json.dumps(INVOKE))
    assert isinstance(e.value, getattr(c.exceptions, code))
    assert e.value.response["Error"]["Code"] == code
    assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] == status


async def test_context_window_is_input_too_long(fake: FakeBedrock) -> None:
    """A prompt over the model's window gets Bedrock's "Input is too long" 400."""
    fake.context_window[NOVA] = 3
    with pytest.raises(ClientError) as e:
        await call(client(fake).converse, modelId=NOVA,
                   messages=[{"role": "user", "content": [{"text": "A long prompt, surely."}]}])  # fmt: skip
    assert e.value.response["Error"] == {
        "Code": "ValidationException", "Message": "Input is too long for requested model."
    }  # fmt: skip


@pytest.mark.parametrize(
    "exception", ["throttlingException", "modelStreamErrorException", "internalServerException"]
)
async def test_an_exception_frame_mid_stream(fake: FakeBedrock, exception: str) -> None:
    """A scripted exception after two deltas is botocore's EventStreamError of that code,
    after the events before it."""
    fake.push(stream_exception(2, exception, "Something went wrong"))
    c = client(fake)
    r = await call(c.invoke_model_with_response_stream, modelId=MODEL, body=json.dumps(INVOKE))
    seen: list[Any] = []

    def drain() -> None:
        seen.extend(r["body"])

    with pytest.raises(EventStreamError) as e:
        await asyncio.to_thread(drain)
    r["body"].close()
    assert e.value.response["Error"] == {"Code": exception, "Message": "Something went wrong"}
    deltas = [json.loads(x["chunk"]["bytes"]) for x in seen]
    assert sum(d["type"] == "content_block_delta" for d in deltas) == 2


def signed(
    fake: FakeBedrock, path: str, body: bytes, *, key: str, secret: str,
    region: str = REGION, token: str | None = None,
) -> dict[str, str]:  # fmt: skip
    """The headers botocore's signer gives a request of ``path`` with these credentials."""
    req = AWSRequest("POST", fake.url + path, data=body,
                     headers={"content-type": "application/json"})  # fmt: skip
    SigV4Auth(Credentials(key, secret, token), "bedrock", region).add_auth(req)
    return dict(req.headers.items())


async def post(
    fake: FakeBedrock, path: str, body: bytes, headers: dict[str, str]
) -> tuple[int, dict[str, str], bytes]:
    async with aiohttp.ClientSession() as s:
        url = URL(fake.url + path, encoded=True)
        async with s.post(url, data=body, headers=headers) as r:
            return r.status, dict(r.headers), await r.read()


BODY = json.dumps(INVOKE).encode()


async def test_a_raw_signed_request_and_its_event_stream(fake: FakeBedrock) -> None:
    """A request signed by botocore's signer and sent by aiohttp is accepted; its event
    stream decodes through the gateway's splitter into Anthropic's SSE."""
    path = PATH + "/invoke-with-response-stream"
    h = signed(fake, path, BODY, key=fake.access_key, secret=fake.secret_key)
    status, headers, raw = await post(fake, path, BODY, h)
    assert status == 200 and headers["Content-Type"] == "application/vnd.amazon.eventstream"
    s = EventStreamSplitter()
    events = s.feed(raw)
    assert events[0].startswith(b"event: message_start\ndata: {")
    assert events[-1].startswith(b"event: message_stop\ndata: {")
    assert s.pending == b"" and s.malformed == 0


@pytest.mark.parametrize(
    ("creds", "code", "words"),
    [
        ({"key": "AKIAUNKNOWN000000000", "secret": "x"}, "UnrecognizedClientException",
         "security token included in the request is invalid"),
        ({"secret": "not-the-secret"}, "InvalidSignatureException",
         "The request signature we calculated does not match"),
        ({"region": "eu-west-1"}, "InvalidSignatureException", "not 'eu-west-1'"),
    ],
)  # fmt: skip
async def test_signature_refusals(
    fake: FakeBedrock, creds: dict[str, str], code: str, words: str
) -> None:
    """An unknown key, a wrong secret, another region: refused with AWS's 403 and errortype."""
    args = {"key": fake.access_key, "secret": fake.secret_key, **creds}
    h = signed(fake, PATH + "/invoke", BODY, **args)
    status, headers, raw = await post(fake, PATH + "/invoke", BODY, h)
    assert status == 403
    assert headers["x-amzn-errortype"].split(":")[0] == code
    assert words in json.loads(raw)["message"]


async def test_a_changed_body_breaks_the_signature(fake: FakeBedrock) -> None:
    """The payload is signed: a body other than the signed one is refused."""
    h = signed(fake, PATH + "/invoke", BODY, key=fake.access_key, secret=fake.secret_key)
    status, headers, _ = await post(fake, PATH + "/invoke", BODY.replace(b"200", b"300"), h)
    assert status == 403 and headers["x-amzn-errortype"].startswith("InvalidSignatureException:")


async def test_session_tokens(fake: FakeBedrock) -> None:
    """A temporary key works with its session token, not without it, and not once expired."""
    fake.add_key("ASIATEMPORARY0000001", "temp-secret", session_token="token-1")
    args = {"key": "ASIATEMPORARY0000001", "secret": "temp-secret"}
    ok = signed(fake, PATH + "/invoke", BODY, token="token-1", **args)
    assert (await post(fake, PATH + "/invoke", BODY, ok))[0] == 200
    for h in (signed(fake, PATH + "/invoke", BODY, **args),
              signed(fake, PATH + "/invoke", BODY, token="token-2", **args)):  # fmt: skip
        status, headers, raw = await post(fake, PATH + "/invoke", BODY, h)
        assert status == 403 and headers["x-amzn-errortype"].startswith("ExpiredTokenException:")
    fake.expire("token-1")
    status, _, raw = await post(fake, PATH + "/invoke", BODY, ok)
    assert status == 403
    assert json.loads(raw) == {"message": "The security token included in the request is expired"}


async def test_session_token_through_botocore(fake: FakeBedrock) -> None:
    """botocore's client with temporary credentials sends its token; once the token has
    expired, the call fails with ExpiredTokenException."""
    fake.add_key("ASIATEMPORARY0000002", "s2", session_token="tok")
    c = client(fake, aws_access_key_id="ASIATEMPORARY0000002", aws_secret_access_key="s2",
               aws_session_token="tok")  # fmt: skip
    await call(c.invoke_model, modelId=MODEL, body=json.dumps(INVOKE))
    fake.expire("tok")
    with pytest.raises(ClientError) as e:
        await call(c.invoke_model, modelId=MODEL, body=json.dumps(INVOKE))
    assert e.value.response["Error"]["Code"] == "ExpiredTokenException"


async def test_no_auth_and_api_keys(fake: FakeBedrock) -> None:
    """No authorization is MissingAuthenticationTokenException; a Bedrock API key as a bearer
    token is accepted when known, refused when not."""
    status, headers, _ = await post(fake, PATH + "/invoke", BODY, {})
    assert status == 403
    assert headers["x-amzn-errortype"].startswith("MissingAuthenticationTokenException:")
    fake.add_api_key("bedrock-api-key-fake")
    good = {"authorization": "Bearer bedrock-api-key-fake"}
    assert (await post(fake, PATH + "/invoke", BODY, good))[0] == 200
    bad = {"authorization": "Bearer bedrock-api-key-other"}
    assert (await post(fake, PATH + "/invoke", BODY, bad))[0] == 403


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"model": MODEL}, "extraneous key [model] is not permitted"),
        ({"stream": True}, "extraneous key [stream] is not permitted"),
        ({"anthropic_version": "2023-06-01"}, "#/anthropic_version"),
        ({"anthropic_beta": "context-1m-2025-08-07"}, "#/anthropic_beta"),
        (
            {"anthropic_beta": ["context-1m-2025-08-07", "claude-code-20250219"]},
            "invalid beta flag",
        ),
        (
            {
                "messages": [
                    {"role": "user", "content": "Hi."},
                    {"role": "system", "content": "Be brief."},
                ]
            },
            "messages.1: role must be user or assistant",
        ),
    ],
)
async def test_invoke_bodies_as_bedrock_checks_them(
    fake: FakeBedrock, change: dict[str, Any], words: str
) -> None:
    """An invoke body with ``model``, ``stream``, another version, a beta that is not a
    list or that Bedrock does not know, or a ``system`` turn in ``messages`` gets Bedrock's
    400 ValidationException."""
    with pytest.raises(ClientError) as e:
        await call(client(fake).invoke_model, modelId=MODEL, body=json.dumps({**INVOKE, **change}))
    assert e.value.response["Error"]["Code"] == "ValidationException"
    assert words in e.value.response["Error"]["Message"]


async def test_anthropic_beta_is_recorded(fake: FakeBedrock) -> None:
    """A list of betas is accepted and recorded with the body."""
    body = {**INVOKE, "anthropic_beta": ["context-1m-2025-08-07"]}
    await call(client(fake).invoke_model, modelId=MODEL, body=json.dumps(body))
    assert fake.requests[0].body["anthropic_beta"] == ["context-1m-2025-08-07"]


async def test_script_per_key(fake: FakeBedrock) -> None:
    """A step pushed for one access key is played on that key's request only."""
    fake.add_key("AKIASECONDKEY0000001", "second")
    fake.push(BedrockError.throttling(), key="AKIASECONDKEY0000001")
    await call(client(fake).invoke_model, modelId=MODEL, body=json.dumps(INVOKE))
    other = client(fake, aws_access_key_id="AKIASECONDKEY0000001", aws_secret_access_key="second")
    with pytest.raises(ClientError) as e:
        await call(other.invoke_model, modelId=MODEL, body=json.dumps(INVOKE))
    assert e.value.response["Error"]["Code"] == "ThrottlingException"


async def test_a_cut_stream_and_a_bad_crc(fake: FakeBedrock) -> None:
    """CutAfter closes the connection mid-stream with no error frame; MalformedEventAt
    sends a frame whose CRC fails, which the splitter reports as a corrupt stream."""
    path = PATH + "/invoke-with-response-stream"
    fake.push(CutAfter(2))
    h = signed(fake, path, BODY, key=fake.access_key, secret=fake.secret_key)
    with pytest.raises(aiohttp.ClientPayloadError):
        await post(fake, path, BODY, h)
    fake.push(MalformedEventAt(1))
    h = signed(fake, path, BODY, key=fake.access_key, secret=fake.secret_key)
    _, _, raw = await post(fake, path, BODY, h)
    events = EventStreamSplitter().feed(raw)
    assert sum(e.startswith(b"event: content_block_delta") for e in events) == 1
    assert b"corrupt (a frame failed its CRC)" in events[-1]


async def test_success_step_shapes_a_converse_stream(fake: FakeBedrock) -> None:
    """The fake provider's Success step forces the text of a ConverseStream, pieces joined."""
    fake.push(Success(text="Forced words."))
    r = await call(client(fake).converse_stream, modelId=NOVA,
                   messages=[{"role": "user", "content": [{"text": "hi"}]}])  # fmt: skip
    got = await asyncio.to_thread(lambda: list(r["stream"]))
    text = "".join(e["contentBlockDelta"]["delta"]["text"] for e in got if "contentBlockDelta" in e)
    assert text == "Forced words."


async def test_a_converse_stream_with_an_exception_through_the_splitter(fake: FakeBedrock) -> None:
    """A raw ConverseStream answer decodes into ``event: <type>`` SSE events, the scripted
    exception frame last as the error event of its type."""
    fake.push(stream_exception(1, "modelStreamErrorException", "The model broke."))
    body = json.dumps({"messages": [{"role": "user", "content": [{"text": "hi"}]}]}).encode()
    path = "/model/amazon.nova-pro-v1%3A0/converse-stream"
    h = signed(fake, path, body, key=fake.access_key, secret=fake.secret_key)
    status, _, raw = await post(fake, path, body, h)
    assert status == 200
    events = EventStreamSplitter().feed(raw)
    names = [e.split(b"\n", 1)[0] for e in events]
    assert names == [b"event: messageStart", b"event: contentBlockDelta", b"event: error"]
    error = json.loads(events[-1].split(b"data: ", 1)[1])
    assert error["error"] == {"type": "modelStreamErrorException", "message": "The model broke."}


async def test_a_request_signed_by_awscrt(fake: FakeBedrock) -> None:
    """A request signed by awscrt (AWS's C signer) verifies too, session token included."""
    fake.add_key("ASIACRTSIGNED0000001", "crt-secret", session_token="crt-token")
    provider = AwsCredentialsProvider.new_static("ASIACRTSIGNED0000001", "crt-secret", "crt-token")
    config = AwsSigningConfig(credentials_provider=provider, region=REGION, service="bedrock")
    host = URL(fake.url).raw_authority
    path = PATH + "/invoke"
    req = HttpRequest("POST", path, HttpHeaders([("host", host), ("content-type", "application/json")]),
                      io.BytesIO(BODY))  # fmt: skip
    await asyncio.wrap_future(aws_sign_request(req, config))
    status, _, raw = await post(fake, path, BODY, {k: v for k, v in req.headers if k != "host"})
    assert status == 200, raw
    assert json.loads(raw)["type"] == "message"
