"""How the gateway reaches a provider: the one pooled HTTP client, the timers of its waits,
the egress (proxies, TLS, the gateway's own secrets kept out of what leaves it) and the
credentials of the clouds (SigV4 keys, OAuth and Entra ID tokens, refreshed ahead of
expiry)."""
