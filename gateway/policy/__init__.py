"""The policy file format: its pydantic models (schema), each file read with the place of
every value (source), checked field by field (validate), a route's override laid over its
policy (merge), and a provider's egress settings. What the files add up to is
:mod:`gateway.routing`'s."""
