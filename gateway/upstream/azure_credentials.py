"""Azure credentials for Azure OpenAI without a key: a Microsoft Entra ID token.

azure-identity's ``DefaultAzureCredential`` finds them as every Azure client does: an
environment service principal, workload identity (AKS), managed identity (App Service,
VMs, Arc) or the Azure CLI's login. The token is fetched by its blocking ``get_token`` in
a thread and refreshed ahead of its expiry, each of its requests given
:data:`~gateway.upstream.credentials.REQUEST_TIMEOUT_S` to connect and to answer
(azure-core's own default is five minutes); each attempt sends the held token as a bearer
token. azure-identity's own log records below ERROR are kept out of the gateway's log.
"""

from __future__ import annotations

from azure.identity import DefaultAzureCredential

from gateway.upstream.credentials import REQUEST_TIMEOUT_S, BearerCredential, Held

#: The scope of an Azure OpenAI (Cognitive Services) token.
SCOPE = "https://cognitiveservices.azure.com/.default"


class AzureCredential(BearerCredential):
    """An Azure OpenAI provider's Entra ID token."""

    cloud = "Azure"
    looked_for = (
        "the AZURE_* environment (service principal, workload identity), managed identity"
        " and the Azure CLI"
    )
    loggers = ("azure.identity", "azure.core", "msal")

    def _fetch(self) -> Held[str]:
        if self._found is None:
            self._found = DefaultAzureCredential(
                connection_timeout=REQUEST_TIMEOUT_S, read_timeout=REQUEST_TIMEOUT_S
            )
        token = self._found.get_token(SCOPE)
        return Held(f"Bearer {token.token}", float(token.expires_on))
