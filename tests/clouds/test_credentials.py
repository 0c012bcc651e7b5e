"""Which providers get cloud credentials, what a missing extra says, what a credential
shows of itself, and that the core install never loads a cloud library."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from yarl import URL

from gateway.errors import CredentialUnavailable
from gateway.policy.schema import Provider
from gateway.upstream.aws_credentials import AwsCredential
from gateway.upstream.azure_credentials import AzureCredential
from gateway.upstream.credential_kinds import credential_of, missing_extra
from gateway.upstream.credentials import BearerCredential, Credential, Held
from gateway.upstream.google_credentials import GoogleCredential
from tests.clouds.cloud_env import isolate, until

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _isolated(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    isolate(monkeypatch, tmp_path)


@pytest.mark.parametrize(
    ("fields", "kind"),
    [
        ({"api": "bedrock", "region": "us-east-1"}, AwsCredential),
        ({"api": "bedrock", "region": "us-east-1", "aws_profile": "prod"}, AwsCredential),
        ({"api": "bedrock", "region": "us-east-1", "api_key_env": "BEDROCK_KEY"}, None),
        ({"api": "vertex", "region": "global", "project": "acme"}, GoogleCredential),
        ({"api": "azure", "base_url": "https://acme.openai.azure.com"}, AzureCredential),
        ({"api": "azure", "base_url": "https://a.openai.azure.com", "api_key_env": "K"}, None),
        ({"api": "openai", "base_url": "https://api.openai.com/v1", "api_key_env": "K"}, None),
    ],
)
def test_each_cloud_provider_gets_its_credential(
    fields: dict[str, Any], kind: type[Credential[Any]] | None
) -> None:
    """Bedrock and Azure without a key, and Vertex, get their cloud's credential; a
    provider with a static key (or of another kind) gets none."""
    credential = credential_of("p", Provider.model_validate(fields))
    if kind is None:
        assert credential is None
    else:
        assert type(credential) is kind
        assert credential.provider == "p"


def test_a_bedrock_credential_signs_for_its_region_and_profile() -> None:
    """The region and profile of the policy reach the AWS credential."""
    provider = Provider.model_validate(
        {"api": "bedrock", "region": "eu-west-3", "aws_profile": "x"}
    )
    credential = credential_of("bedrock-eu", provider)
    assert isinstance(credential, AwsCredential)
    assert credential.region == "eu-west-3"
    assert "profile x" in credential.looked_for


@pytest.mark.parametrize(
    ("api", "module", "install"),
    [
        ("bedrock", "botocore", "pip install 'llm-gateway[aws]'"),
        ("bedrock", "awscrt", "pip install 'llm-gateway[aws]'"),
        ("vertex", "google.auth", "pip install 'llm-gateway[gcp]'"),
        ("vertex", "requests", "pip install 'llm-gateway[gcp]'"),
        ("azure", "azure.identity", "pip install 'llm-gateway[azure]'"),
    ],
)
def test_a_missing_library_names_the_extra_to_install(
    monkeypatch: pytest.MonkeyPatch, api: str, module: str, install: str
) -> None:
    """With the library importable nothing is missing; without it (blocked in
    sys.modules, as an import finds it) the pip command of its extra."""
    assert missing_extra(api) is None
    monkeypatch.setitem(sys.modules, module, None)
    assert missing_extra(api) == install
    assert missing_extra("openai") is None


def test_a_credential_is_not_usable_before_it_starts() -> None:
    """Before start, problem says credentials were not looked for; repr shows only the
    provider and the problem."""
    credential = GoogleCredential("vertex-eu")
    assert credential.problem == "vertex-eu: Google credentials not looked for yet"
    assert repr(credential) == (
        "GoogleCredential(provider='vertex-eu',"
        " problem='vertex-eu: Google credentials not looked for yet')"
    )


def test_the_core_install_loads_no_cloud_library() -> None:
    """Importing the credentials module, asking which extras are missing and making the
    credential of a non-cloud provider loads none of botocore, awscrt, google-auth or
    azure-identity (only the namespace packages google and azure, to look)."""
    code = """
import json, sys
from gateway.upstream.credential_kinds import credential_of, missing_extra
from gateway.policy.schema import Provider
credential_of("p", Provider.model_validate({"api": "openai", "base_url": "https://x/v1"}))
missing_extra("bedrock"); missing_extra("vertex"); missing_extra("azure")
libraries = ("botocore", "awscrt", "google.auth", "google.oauth2", "azure.identity", "azure.core")
print(json.dumps(sorted(m for m in sys.modules if m.startswith(libraries))))
"""
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60,
        cwd=ROOT, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    assert json.loads(out.stdout) == []


class Scripted(BearerCredential):
    """A credential whose fetches the test decides: each gives a token valid for
    ``lifetime`` seconds, or raises while ``failing`` holds a reason."""

    cloud = "Test"
    looked_for = "the test's script"

    def __init__(
        self, lifetime: float, changes: list[tuple[str, str | None]], timeout: float = 5.0
    ) -> None:
        super().__init__(
            "p", lambda p, q: changes.append((p, q)), timeout=timeout, retry_first=0.05,
            retry_cap=0.1,
        )  # fmt: skip
        self.lifetime = lifetime
        self.failing: str | None = None
        self.answering = threading.Event()  # cleared: a fetch gets no answer until set
        self.answering.set()
        self.fetches = 0

    def _fetch(self) -> Held[str]:
        self.fetches += 1
        self.answering.wait()
        if self.failing is not None:
            raise ConnectionError(self.failing)
        return Held(f"Bearer t{self.fetches}", time.time() + self.lifetime)


def _sent(credential: Credential[Any]) -> str:
    headers: dict[str, str] = {}
    credential.authorize("POST", URL("https://x/"), headers, b"")
    return headers["authorization"]


async def test_a_failing_refresh_keeps_the_old_token_until_it_expires() -> None:
    """The token service fails from the first refresh on: the old token is sent until its
    expiry, retried meanwhile with no problem reported; at expiry the problem and
    on_change; the service back, the next retry recovers."""
    changes: list[tuple[str, str | None]] = []
    credential = Scripted(0.8, changes)
    await credential.start()
    credential.failing = "token service down"
    started = time.monotonic()
    await until(lambda: credential.fetches >= 3, 1.0)  # the refresh at 0.4 s and retries
    assert time.monotonic() - started < 0.75
    assert credential.problem is None and changes == []
    assert _sent(credential) == "Bearer t1"
    await until(lambda: credential.problem is not None, 1.0)
    assert time.monotonic() - started >= 0.7  # not before the old token's expiry
    problem = credential.problem
    assert problem == (
        "p: no usable Test credentials (looked for the test's script):"
        " ConnectionError: token service down"
    )
    assert changes == [("p", problem)]
    with pytest.raises(CredentialUnavailable, match="token service down"):
        _sent(credential)
    credential.failing = None
    await until(lambda: credential.problem is None, 1.0)
    assert changes[-1] == ("p", None)
    assert _sent(credential).startswith("Bearer t")
    await credential.close()


async def test_a_token_already_expired_when_fetched_is_a_failure() -> None:
    """A token that comes back expired (a wrong clock) is not taken: a problem that says
    so, nothing sent."""
    changes: list[tuple[str, str | None]] = []
    credential = Scripted(-1.0, changes)
    await credential.start()
    await credential.close()
    assert credential.problem is not None and "already expired" in credential.problem
    with pytest.raises(CredentialUnavailable):
        _sent(credential)


async def test_a_first_fetch_with_no_answer_is_a_problem_at_its_time_limit() -> None:
    """The token service never answers the first fetch: start returns at the time limit
    with the problem (on_change hears it); the answer, once it comes, is taken at once
    (no retry waited for) and on_change hears of the recovery."""
    changes: list[tuple[str, str | None]] = []
    credential = Scripted(60.0, changes, timeout=0.3)
    credential.answering.clear()
    began = time.monotonic()
    await credential.start()
    assert 0.25 <= time.monotonic() - began < 0.6
    problem = "p: no usable Test credentials (looked for the test's script): TimeoutError:"
    assert changes == [("p", f"{problem} no answer within 0.3 s")]
    with pytest.raises(CredentialUnavailable, match="no answer within"):
        _sent(credential)
    credential.answering.set()
    await until(lambda: credential.problem is None, 0.2)
    assert changes[-1] == ("p", None) and credential.fetches == 1
    assert _sent(credential) == "Bearer t1"
    await credential.close()


async def test_a_refresh_with_no_answer_is_a_problem_when_the_token_expires() -> None:
    """A token of 0.6 s whose refresh (at 0.3 s) gets no answer: the token is sent until
    its expiry, then the problem says it expired with its refresh unanswered; the late
    answer brings the credential back."""
    changes: list[tuple[str, str | None]] = []
    credential = Scripted(0.6, changes, timeout=5.0)
    await credential.start()
    began = time.monotonic()
    credential.answering.clear()
    await until(lambda: credential.fetches == 2, 1.0)
    assert _sent(credential) == "Bearer t1" and changes == []
    await until(lambda: credential.problem is not None, 1.0)
    assert 0.45 <= time.monotonic() - began < 0.8  # at the expiry, not the 5 s limit
    assert "expired while their refresh had no answer" in str(credential.problem)
    assert changes == [("p", credential.problem)]
    credential.answering.set()
    await until(lambda: credential.problem is None, 0.2)
    assert _sent(credential) == "Bearer t2" and changes[-1] == ("p", None)
    await credential.close()


async def test_closing_leaves_a_hung_fetch_behind_at_once() -> None:
    """close() with a fetch that never answers returns at once; the fetch's thread is a
    daemon (it never holds up the process's exit), and its late answer is dropped."""
    credential = Scripted(60.0, [], timeout=5.0)
    credential.answering.clear()
    task = asyncio.create_task(credential.start())
    await until(lambda: credential.fetches == 1, 1.0)
    (thread,) = [t for t in threading.enumerate() if t.name == "cloud credentials of p"]
    assert thread.daemon
    began = time.monotonic()
    await credential.close()
    await asyncio.wait_for(task, 0.5)  # start() is not left waiting either
    assert time.monotonic() - began < 0.1
    credential.answering.set()
    thread.join(1.0)
    await asyncio.sleep(0.01)
    assert credential.problem is not None  # the late answer was not taken
