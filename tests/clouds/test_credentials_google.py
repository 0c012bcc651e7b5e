"""Google credentials for Vertex AI: Application Default Credentials from a service-account
file or the metadata server, OAuth tokens refreshed ahead of expiry."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import sys
import time
from pathlib import Path

import pytest
from google.auth import jwt
from yarl import URL

from gateway.errors import CredentialUnavailable
from gateway.testing.fake_google_token import JWT_BEARER, FakeGoogleToken
from gateway.upstream import google_credentials
from gateway.upstream.google_credentials import SCOPE, GoogleCredential
from tests.clouds.cloud_env import Ticker, isolate, leaked, until

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _isolated(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    isolate(monkeypatch, tmp_path)


def _token(credential: GoogleCredential) -> str:
    headers: dict[str, str] = {}
    credential.authorize("POST", URL("https://aiplatform.googleapis.com/v1/x"), headers, b"{}")
    scheme, _, token = headers["authorization"].partition(" ")
    assert scheme == "Bearer"
    return token


async def test_a_service_account_file_gets_a_token(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """GOOGLE_APPLICATION_CREDENTIALS names a service-account file: google-auth sends a
    JWT-bearer grant signed by its key with the cloud-platform scope, and the bearer
    token the fake issued is sent."""
    caplog.set_level(logging.DEBUG)
    async with FakeGoogleToken() as google:
        monkeypatch.setenv(
            "GOOGLE_APPLICATION_CREDENTIALS", str(google.service_account_file(tmp_path))
        )
        credential = GoogleCredential("vertex-eu")
        await credential.start()
        assert credential.problem is None
        token = _token(credential)
        assert google.valid(token)
        assert google.rejected == []
        (grant,) = google.requests
        assert grant.form["grant_type"] == JWT_BEARER
        await credential.close()
    assert jwt.decode(grant.form["assertion"], verify=False)["scope"] == SCOPE
    assert leaked([token], repr(credential), caplog.text) == []


async def test_a_key_the_token_endpoint_does_not_know_is_a_problem(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A service-account file whose key the endpoint does not hold: the grant is refused
    (invalid_grant), and the problem names the provider and Google's answer."""
    async with FakeGoogleToken() as google:
        path = google.service_account_file(tmp_path)
        async with FakeGoogleToken() as other:
            text = path.read_text().replace(google.token_uri, other.token_uri)
            path.write_text(text)
            monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(path))
            credential = GoogleCredential("vertex-eu")
            await credential.start()
            await credential.close()
        assert other.rejected == ["not a JWT signed by a service-account key of this fake"]
    assert credential.problem is not None
    assert credential.problem.startswith("vertex-eu: no usable Google credentials")
    assert "invalid_grant" in credential.problem
    with pytest.raises(CredentialUnavailable, match="vertex-eu"):
        _token(credential)


async def test_a_token_is_refreshed_across_its_expiry(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Tokens of 1.5 s: every request over 3.5 s carries a token the endpoint still
    accepts, from several refreshes."""
    async with FakeGoogleToken(lifetime=1.5) as google:
        monkeypatch.setenv(
            "GOOGLE_APPLICATION_CREDENTIALS", str(google.service_account_file(tmp_path))
        )
        credential = GoogleCredential("vertex-eu")
        await credential.start()
        tokens, refused = set(), 0
        end = time.monotonic() + 3.5
        while time.monotonic() < end:
            token = _token(credential)
            tokens.add(token)
            refused += not google.valid(token)
            await asyncio.sleep(0.02)
        await credential.close()
    assert refused == 0
    assert len(tokens) >= 3


async def test_a_slow_refresh_does_not_block_the_event_loop(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """google-auth's refresh taking 2 s runs in a thread: a coroutine ticking every 10 ms
    never waits more than 100 ms meanwhile."""
    async with FakeGoogleToken(lifetime=0.4) as google:
        monkeypatch.setenv(
            "GOOGLE_APPLICATION_CREDENTIALS", str(google.service_account_file(tmp_path))
        )
        credential = GoogleCredential("vertex-eu")
        await credential.start()
        google.delay = 2.0
        with Ticker() as ticker:
            await until(lambda: len(google.requests) > 1, 2.0)
            started = time.monotonic()
            await until(lambda: len(google.issued) > 1, 3.0)
            took = time.monotonic() - started
        await credential.close()
    assert took >= 1.9
    assert ticker.longest < 0.1, f"the event loop stalled {ticker.longest * 1000:.0f} ms"


async def test_a_missing_file_is_a_problem_then_a_good_one_recovers(
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """GOOGLE_APPLICATION_CREDENTIALS names no file: a problem naming the provider and
    what was looked for, on_change hears it; the file appears: the retry gets a token,
    on_change(provider, None). No token leaks."""
    caplog.set_level(logging.DEBUG)
    async with FakeGoogleToken() as google:
        path = tmp_path / "later" / "service-account.json"
        monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(path))
        changes: list[tuple[str, str | None]] = []
        credential = GoogleCredential(
            "vertex-eu", lambda p, q: changes.append((p, q)), retry_first=0.05, retry_cap=0.1
        )
        await credential.start()
        problem = credential.problem
        assert problem is not None and "GOOGLE_APPLICATION_CREDENTIALS" in problem
        assert changes == [("vertex-eu", problem)]
        path.parent.mkdir()
        google.service_account_file(path.parent)
        await until(lambda: credential.problem is None)
        assert changes[-1] == ("vertex-eu", None)
        token = _token(credential)
        assert google.valid(token)
        await credential.close()
    out = capsys.readouterr()
    assert leaked([token], repr(credential), problem, caplog.text, out.out, out.err) == []


_IN_A_GCE_PROCESS = """
import asyncio, json
from yarl import URL
from gateway.upstream.google_credentials import GoogleCredential

async def main():
    credential = GoogleCredential("vertex-eu")
    await credential.start()
    headers = {}
    if credential.problem is None:
        credential.authorize("POST", URL("https://aiplatform.googleapis.com/"), headers, b"")
    await credential.close()
    print(json.dumps({"problem": credential.problem, "authorization": headers.get("authorization")}))

asyncio.run(main())
"""


async def test_the_metadata_server_gives_a_token(tmp_path: Path) -> None:
    """Without a credentials file, google-auth finds the metadata server (GKE workload
    identity, GCE) at GCE_METADATA_HOST, and its token is sent (in a fresh process:
    google-auth reads that variable when first imported)."""
    async with FakeGoogleToken() as google:
        env = {k: v for k, v in os.environ.items() if k != "GOOGLE_APPLICATION_CREDENTIALS"}
        env.update(GCE_METADATA_HOST=google.host, GCE_METADATA_IP=google.host, PYTHONPATH=str(ROOT))
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-c", _IN_A_GCE_PROCESS, env=env, cwd=tmp_path,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        out, err = await asyncio.wait_for(process.communicate(), 30)
        assert process.returncode == 0, err.decode()
        answer = json.loads(out)
        assert answer["problem"] is None
        assert google.valid(answer["authorization"].removeprefix("Bearer "))
        token_requests = [r for r in google.requests if r.path.endswith("/token")]
        assert token_requests and token_requests[0].headers["metadata-flavor"] == "Google"
        assert token_requests[0].query["scopes"] == SCOPE


async def test_a_token_request_that_hangs_is_given_up_at_the_request_limit(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The token endpoint never answers: google-auth's request ends at the gateway's
    request limit (0.3 s here; google-auth alone waits 120 s), a failed fetch."""
    monkeypatch.setattr(google_credentials, "REQUEST_TIMEOUT_S", 0.3)
    async with FakeGoogleToken() as google:
        google.hang = True
        monkeypatch.setenv(
            "GOOGLE_APPLICATION_CREDENTIALS", str(google.service_account_file(tmp_path))
        )
        began = time.monotonic()
        problem = await asyncio.to_thread(GoogleCredential("vertex-eu").check)
        assert time.monotonic() - began < 3.0
    assert problem is not None and "timed out" in problem.lower()
