"""The policy set: the teams, routes, models and deployments of the policy files, built and
cross-checked (build), loaded and reloaded from disk (load), and resolved per request
(policyset). The file format itself is :mod:`gateway.policy`'s."""
