"""What authenticating one attempt to a cloud provider costs, in CPU per request.

    python bench/auth_cost.py [--repeat N] [--count N]

Each cloud credential's ``authorize`` (``gateway/upstream/``) applied to a typical Bedrock
request (a model path with an inference-profile id, a 2 KB JSON body), against nothing (an
empty call, the plain attempt's cost of the same loop):

- SigV4 with awscrt, the gateway's signer, from temporary credentials (session token);
- SigV4 with botocore's pure-Python ``SigV4Auth`` on the same request, for comparison;
- the bearer token of Google (Vertex) and Azure (Entra ID), the credentials got from the
  local fake token services of ``gateway/testing``.

Each figure is the median of ``--repeat`` runs of ``--count`` calls, in µs of the
process's CPU time (every thread's: awscrt signs in C, on the calling thread) per call.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import yarl
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from gateway.testing.fake_azure_identity import FakeAzureIdentity
from gateway.testing.fake_google_token import FakeGoogleToken
from gateway.upstream.aws_credentials import AwsCredential
from gateway.upstream.azure_credentials import AzureCredential
from gateway.upstream.credentials import Credential
from gateway.upstream.google_credentials import GoogleCredential

URL = (
    "https://bedrock-runtime.us-east-1.amazonaws.com/model/"
    "us.anthropic.claude-sonnet-4-5-20250929-v1%3A0/invoke"
)
TARGET = yarl.URL(URL, encoded=True)
BODY = (b'{"anthropic_version":"bedrock-2023-05-31","max_tokens":1024,"messages":[' + b"x" * 2048)[
    :2048
]
KEY_ID, SECRET, TOKEN = "ASIAFAKEKEY000000001", "fake/secret/" + "0" * 28, "FwoG" + "z" * 400


def per_call_us(call: Callable[[], None], count: int) -> float:
    start = time.process_time()
    for _ in range(count):
        call()
    return (time.process_time() - start) / count * 1e6


def authorizing(credential: Credential[object]) -> Callable[[], None]:
    def call() -> None:
        headers = {"content-type": "application/json", "accept": "application/json"}
        credential.authorize("POST", TARGET, headers, BODY)

    return call


def botocore_signing() -> Callable[[], None]:
    signer = SigV4Auth(Credentials(KEY_ID, SECRET, TOKEN), "bedrock", "us-east-1")

    def call() -> None:
        request = AWSRequest("POST", URL, {"content-type": "application/json"}, BODY)
        signer.add_auth(request)

    return call


def plain() -> Callable[[], None]:
    def call() -> None:
        headers = {"content-type": "application/json", "accept": "application/json"}
        headers.get("authorization")

    return call


async def credentials(folder: Path) -> dict[str, Callable[[], None]]:
    os.environ.update(
        AWS_ACCESS_KEY_ID=KEY_ID, AWS_SECRET_ACCESS_KEY=SECRET, AWS_SESSION_TOKEN=TOKEN
    )
    os.environ["AWS_EC2_METADATA_DISABLED"] = "true"
    aws = AwsCredential("bedrock", "us-east-1")
    async with FakeGoogleToken() as google, FakeAzureIdentity() as azure:
        os.environ["GOOGLE_APPLICATION_CREDENTIALS"] = str(google.service_account_file(folder))
        os.environ.update(IDENTITY_ENDPOINT=azure.endpoint, IDENTITY_HEADER=azure.secret)
        vertex, entra = GoogleCredential("vertex"), AzureCredential("azure")
        for credential in (aws, vertex, entra):
            await credential.start()
            await credential.close()
            if credential.problem is not None:
                raise SystemExit(credential.problem)
    return {
        "plain (no auth)": plain(),
        "SigV4, awscrt (the gateway)": authorizing(aws),
        "SigV4, botocore SigV4Auth": botocore_signing(),
        "bearer, Google (Vertex)": authorizing(vertex),
        "bearer, Azure (Entra ID)": authorizing(entra),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--count", type=int, default=3000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        calls = asyncio.run(credentials(Path(folder)))
    results: dict[str, list[float]] = {name: [] for name in calls}
    for _ in range(args.repeat):  # interleaved, so a busy moment hits every row alike
        for name, call in calls.items():
            results[name].append(per_call_us(call, args.count))
    base = statistics.median(results["plain (no auth)"])
    print(f"CPU per authorize, body {len(BODY)} B, median of {args.repeat} x {args.count}")
    print(f"{'':32} {'µs/call':>9} {'over plain':>11}")
    for name, samples in results.items():
        median = statistics.median(samples)
        print(f"{name:32} {median:9.2f} {median - base:+11.2f}")


if __name__ == "__main__":
    main()
