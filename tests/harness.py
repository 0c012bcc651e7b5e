"""Run the real gateway on a loopback port in front of the fake provider.

``Harness`` writes a policy directory (a provider pointing at the fake, a few
models, a team with a known key, a fast policy), starts the gateway the way
``serve`` does and hands out official SDK clients.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anthropic
import openai
import yaml
from prometheus_client import CollectorRegistry

from gateway.observe.metrics import Metrics
from gateway.policy.merge import deep_merge
from gateway.routing.policyset import hash_key
from gateway.settings import GatewaySettings
from gateway.testing import FakeProvider
from gateway.web.app import create_app
from gateway.web.gateway import Gateway
from tests.waiting import eventually

CLIENT_KEY = "team-a-client-key"
PROVIDER_KEY = "provider-secret-key"
PROVIDER_KEY_ENV = "FAKE_PROVIDER_KEY"

# Short real waits: tests must stay fast.
FAST_POLICY: dict[str, Any] = {
    "retry": {
        "max_retries": 3,
        "rate_limit": {"base": "20ms", "cap": "100ms", "jitter": "10ms"},
        "transient": {"base": "10ms", "cap": "50ms"},
    },
    "turn_retry": {"wait": "20ms", "max": 1},
    "fallback": {"after_consecutive_server_errors": 2, "cooldown": "1s"},
    "stream": {"keepalive": "1s"},
    "timeouts": {"connect": "1s", "first_byte": "2s", "stream_idle": "2s", "total": "10s"},
}


def policy_files(
    fake_url: str, policy: dict[str, Any] | None = None, limits: dict[str, int] | None = None
) -> dict[str, Any]:
    """A policy set as {relative path: YAML data}: the platform file and one team file."""
    models = {
        "gpt-test": {"provider": "fake", "upstream_model": "fake-model"},
        "gpt-backup": {"provider": "fake"},
        "gpt-third": {"provider": "fake"},
        "claude-test": {"provider": "fake-anthropic", "prefill": True},
        "claude-backup": {"provider": "fake-anthropic"},
        "gpt-large": {"provider": "fake", "context_window": 100000},
        "gpt-small": {"provider": "fake", "context_window": 3000},
        "gpt-prefill": {"provider": "fake", "prefill": True},
        "forbidden-model": {"provider": "fake"},
    }
    for spec in models.values():  # the fake speaks both OpenAI APIs, as OpenAI does
        if spec["provider"] == "fake":
            spec["upstream_api"] = ["chat", "responses"]
    return {
        "platform.yaml": {
            "providers": {
                "fake": {"api": "openai", "base_url": fake_url + "/v1",
                         "api_key_env": PROVIDER_KEY_ENV},
                "fake-anthropic": {"api": "anthropic", "base_url": fake_url,
                                   "api_key_env": PROVIDER_KEY_ENV},
            },
            "models": models,
            "policies": {"fast": deep_merge(FAST_POLICY, policy or {})},
        },
        "teams/team-a.yaml": {
            "teams": {
                "team-a": {
                    "keys": [hash_key(CLIENT_KEY)],
                    "models": ["gpt-*", "claude-*"],
                    "routes": [{"match": {"model": "*"}, "policy": "fast"}],
                    "limits": limits or {},
                }
            }
        },
    }  # fmt: skip


def platform_files(providers: dict[str, Any], models: dict[str, Any]) -> dict[str, Any]:
    """A policy set of ``providers`` and ``models`` under the fast policy, and one team
    (``apps``, :data:`CLIENT_KEY`) routed to every model."""
    return {
        "platform.yaml": {
            "providers": providers,
            "models": models,
            "policies": {"fast": FAST_POLICY},
        },
        "teams/apps.yaml": {
            "teams": {
                "apps": {
                    "keys": [hash_key(CLIENT_KEY)],
                    "routes": [{"match": {"model": "*"}, "policy": "fast"}],
                }
            }
        },
    }


def write_policies(root: Path, files: dict[str, Any]) -> Path:
    for rel, data in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(yaml.safe_dump(data, sort_keys=False))
    return root


class Harness:
    def __init__(self, fake: FakeProvider, policy_dir: Path, **settings: Any) -> None:
        self.fake = fake
        self.policy_dir = policy_dir
        self.settings = GatewaySettings(policy_dir=policy_dir, **settings)
        self.metrics = Metrics(CollectorRegistry())
        self.app: Gateway | None = None
        self._clients: list[Any] = []
        self.url = ""

    async def start(self, *, ready: bool = True) -> Harness:
        """Start the gateway; ``ready``: and wait until ``/readyz`` would say so (the first
        cloud tokens came or their time is up), as a load balancer waits."""
        self.app = create_app(self.settings, metrics=self.metrics)
        port = await self.app.start("127.0.0.1", 0)
        self.url = f"http://127.0.0.1:{port}"
        if ready:
            app = self.app
            await eventually(lambda: app.credentials.started, 30, step=0.005, what="readiness")
        return self

    async def stop(self) -> None:
        for c in self._clients:
            if isinstance(c, openai.AsyncOpenAI | anthropic.AsyncAnthropic):
                await c.close()
            else:
                c.close()
        if self.app is not None:
            await self.app.stop()

    @property
    def gateway(self) -> Gateway:
        assert self.app is not None
        return self.app

    def openai(self, **kw: Any) -> openai.OpenAI:
        kw.setdefault("max_retries", 0)
        return self._keep(openai.OpenAI(base_url=self.url + "/v1", api_key=CLIENT_KEY, **kw))

    def async_openai(self, **kw: Any) -> openai.AsyncOpenAI:
        kw.setdefault("max_retries", 0)
        return self._keep(openai.AsyncOpenAI(base_url=self.url + "/v1", api_key=CLIENT_KEY, **kw))

    def async_anthropic(self, **kw: Any) -> anthropic.AsyncAnthropic:
        kw.setdefault("max_retries", 0)
        return self._keep(anthropic.AsyncAnthropic(base_url=self.url, api_key=CLIENT_KEY, **kw))

    def _keep(self, client: Any) -> Any:
        self._clients.append(client)
        return client

    def metric(self, name: str, **labels: str) -> float:
        value = self.metrics.registry.get_sample_value(name, labels)
        return 0.0 if value is None else value
