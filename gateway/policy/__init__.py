"""The policy file format: its pydantic models (schema), each file read with the place of
every value (source), checked field by field (validate), a route's override laid over its
policy (merge), a provider's egress settings (egress) and its certificate files checked
(cert_files). What the files add up to is :mod:`gateway.routing`'s."""
