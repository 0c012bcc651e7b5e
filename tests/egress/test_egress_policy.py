"""Provider egress settings in policy files: defaults, paths, and every problem as file:line."""

from __future__ import annotations

import textwrap
from collections.abc import Callable, Mapping
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization

from gateway.cli import main as cli_main
from gateway.errors import PolicyError
from gateway.policy.schema import Provider, policy_json_schema
from gateway.routing.load import load_policy_dir, load_policy_texts
from gateway.routing.policyset import PolicySet
from tests.egress.support import Certs

pytestmark = pytest.mark.fast

Load = Callable[..., PolicySet]
Problems = Callable[..., list[str]]


def write(root: Path, files: Mapping[str, str]) -> Path:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).lstrip("\n"))
    return root


@pytest.fixture
def load(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Load:
    """Write files to ./p (cwd = tmp_path, so messages read ``p/file.yaml:N``) and load them."""
    monkeypatch.chdir(tmp_path)

    def _load(files: Mapping[str, str]) -> PolicySet:
        write(tmp_path / "p", files)
        return load_policy_dir(Path("p"), env={})

    return _load


@pytest.fixture
def problems(load: Load) -> Problems:
    def _problems(files: Mapping[str, str]) -> list[str]:
        with pytest.raises(PolicyError) as info:
            load(files)
        return [str(p) for p in info.value.problems]

    return _problems


def one_provider(fields: str, name: str = "vllm") -> str:
    """A policy file with one openai provider (``fields`` on the lines after base_url)."""
    body = textwrap.indent(textwrap.dedent(fields).strip("\n"), " " * 4)
    return (
        f"providers:\n  {name}:\n    api: openai\n    base_url: https://vllm.internal:8000/v1\n"
        f"{body}\n"
    )


# ---- the fields ---------------------------------------------------------------------


def test_defaults() -> None:
    """No proxy (the environment decides), no own CA, no client certificate, verification on."""
    p = Provider(api="openai", base_url="https://api.openai.com/v1")
    assert (p.proxy, p.ca_file, p.client_cert, p.client_key, p.tls_verify) == (
        None,
        None,
        None,
        None,
        True,
    )


def test_all_fields_load_and_relative_paths_start_at_the_policy_file(
    load: Load, tmp_path: Path, certs: Certs
) -> None:
    """Relative paths resolve against the folder of the file naming them; absolute ones stay."""
    folder = tmp_path / "p" / "platform"
    (folder / "tls").mkdir(parents=True)
    for f in (certs.ca_file, certs.client_cert, certs.client_key):
        (folder / "tls" / f.name).write_bytes(f.read_bytes())
    ps = load(
        {
            "platform/providers.yaml": one_provider(
                f"""
                proxy: http://user:pw@proxy.corp:3128
                ca_file: tls/ca.pem
                client_cert: ./tls/client.crt
                client_key: {certs.client_key}
                tls_verify: true
                """
            )
        }
    )
    p = ps.providers["vllm"]
    assert p.proxy == "http://user:pw@proxy.corp:3128"
    assert p.ca_file == str(folder / "tls" / "ca.pem")
    assert p.client_cert == str(folder / "tls" / "client.crt")
    assert p.client_key == str(certs.client_key)
    assert p.tls_verify is True


def test_relative_paths_keep_symlinks(load: Load, tmp_path: Path, certs: Certs) -> None:
    """A path through a symlink stays as written (Kubernetes ..data mounts swap the target)."""
    real = tmp_path / "p" / "..2026_01_01"
    real.mkdir(parents=True)
    (real / "ca.pem").write_bytes(certs.ca_file.read_bytes())
    (tmp_path / "p" / "current").symlink_to(real.name)
    ps = load({"a.yaml": one_provider("ca_file: current/ca.pem")})
    assert ps.providers["vllm"].ca_file == str(tmp_path / "p" / "current" / "ca.pem")


def test_in_memory_texts_resolve_against_the_current_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, certs: Certs
) -> None:
    monkeypatch.chdir(certs.folder)
    ps = load_policy_texts({"a.yaml": one_provider("ca_file: ca.pem")})
    assert ps.providers["vllm"].ca_file == str(certs.ca_file)


def test_proxy_is_not_in_repr() -> None:
    """repr() of a provider (tracebacks, debug logs) never shows the proxy's password."""
    p = Provider(api="openai", base_url="https://x/v1", proxy="http://u:hunter2@proxy:3128")
    assert "hunter2" not in repr(p)
    assert "hunter2" not in str(p)


def test_json_schema_documents_the_fields() -> None:
    props = policy_json_schema()["$defs"]["Provider"]["properties"]
    assert {"proxy", "ca_file", "client_cert", "client_key", "tls_verify"} <= set(props)
    assert props["tls_verify"]["default"] is True
    assert props["proxy"]["pattern"] == "^[Hh][Tt][Tt][Pp]://"


# ---- problems -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("proxy", "message"),
    [
        ("socks5://user:pw-secret@proxy:1080", "only http:// proxies are supported, not socks5://"),
        ("https://user:pw-secret@proxy:3128", "only http:// proxies are supported, not https://"),
        ("user:pw-secret@proxy:3128", "a proxy is a URL like http://proxy.corp:3128"),
        ("http://user:pw-secret@proxy:3128/path", "scheme, host and port only"),
        ("http://user:pw-secret@:3128", "the proxy URL has no host"),
        ("http://user:pw-secret@proxy:99999", "invalid host or port"),
    ],
)
def test_bad_proxy_urls_are_rejected_without_the_password(
    problems: Problems, proxy: str, message: str
) -> None:
    found = problems({"a.yaml": one_provider(f"proxy: '{proxy}'")})
    assert len(found) == 1
    assert found[0].startswith("p/a.yaml:5: providers.vllm.proxy: ")
    assert message in found[0]
    assert "pw-secret" not in found[0]


@pytest.mark.parametrize(
    ("given", "missing"), [("client_cert", "client_key"), ("client_key", "client_cert")]
)
def test_client_cert_and_key_go_together(
    problems: Problems, certs: Certs, given: str, missing: str
) -> None:
    path = certs.client_cert if given == "client_cert" else certs.client_key
    found = problems({"a.yaml": one_provider(f"{given}: {path}")})
    assert found == [f"p/a.yaml:2: providers.vllm: {given} needs {missing}: set both"
                     " (the same file twice when one PEM holds both)"]  # fmt: skip


def test_missing_files_are_reported_at_their_line(problems: Problems, tmp_path: Path) -> None:
    """Each unreadable file is one problem on its own line, naming the resolved path."""
    found = problems(
        {
            "a.yaml": one_provider(
                """
                ca_file: certs/nope.pem
                client_cert: /nonexistent/client.crt
                client_key: /nonexistent/client.key
                """
            )
            + "models:\n  m: {provider: vllm}\n"
        }
    )
    resolved = tmp_path / "p" / "certs" / "nope.pem"
    assert found == [
        f"p/a.yaml:5: providers.vllm.ca_file: cannot read {resolved}: No such file or directory",
        "p/a.yaml:6: providers.vllm.client_cert: cannot read /nonexistent/client.crt:"
        " No such file or directory",
        "p/a.yaml:7: providers.vllm.client_key: cannot read /nonexistent/client.key:"
        " No such file or directory",
    ]  # and the model's provider is not called unknown


def test_a_directory_is_not_a_file(problems: Problems, certs: Certs) -> None:
    found = problems({"a.yaml": one_provider(f"ca_file: {certs.folder}")})
    assert found == [
        f"p/a.yaml:5: providers.vllm.ca_file: cannot read {certs.folder}: Is a directory"
    ]


def test_files_that_are_not_pem(problems: Problems, tmp_path: Path, certs: Certs) -> None:
    """A CA file without a certificate, a key that does not match: caught by check."""
    (tmp_path / "junk.pem").write_text("not a certificate\n")
    other = certs.ca.issue_cert("other.test")
    other.private_key_pem.write_to_path(str(tmp_path / "other.key"))
    found = problems(
        {
            "a.yaml": f"""
            providers:
              a:
                api: openai
                base_url: https://a.internal/v1
                ca_file: {tmp_path / "junk.pem"}
              b:
                api: openai
                base_url: https://b.internal/v1
                client_cert: {certs.client_cert}
                client_key: {tmp_path / "other.key"}
            """
        }
    )
    assert found == [
        f"p/a.yaml:5: providers.a.ca_file: {tmp_path / 'junk.pem'} holds no PEM certificate",
        "p/a.yaml:9: providers.b.client_cert: cannot use client_cert with client_key:"
        " client_key does not match client_cert",
    ]


def test_an_encrypted_key_is_reported(problems: Problems, tmp_path: Path, certs: Certs) -> None:
    """An encrypted key would make OpenSSL prompt for a password on the terminal: refused."""
    key = serialization.load_pem_private_key(certs.client_key.read_bytes(), password=None)
    encrypted = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.BestAvailableEncryption(b"pass"),
    )
    (tmp_path / "enc.key").write_bytes(encrypted)
    found = problems(
        {
            "a.yaml": one_provider(
                f"client_cert: {certs.client_cert}\nclient_key: {tmp_path / 'enc.key'}"
            )
        }
    )
    assert found == [
        "p/a.yaml:6: providers.vllm.client_key: client_key is encrypted: give an unencrypted PEM key"
    ]


def test_sim_takes_no_egress_settings(problems: Problems) -> None:
    found = problems({"a.yaml": "providers:\n  sim: {api: sim, tls_verify: false}\n"})
    assert found == [
        "p/a.yaml:2: providers.sim: api sim is served in-process: tls_verify does not apply to it"
    ]


def test_check_reports_file_problems(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`llm-gateway check` prints file:line: message for a missing CA file and exits 1."""
    monkeypatch.chdir(tmp_path)
    write(tmp_path / "p", {"a.yaml": one_provider("ca_file: ca.pem")})
    assert cli_main(["check", "p"]) == 1
    err = capsys.readouterr().err.splitlines()
    assert err == [
        f"p/a.yaml:5: providers.vllm.ca_file: cannot read {tmp_path / 'p' / 'ca.pem'}:"
        " No such file or directory",
        "1 problem found",
    ]
