"""Format translation between the client APIs (SPEC §13); the attempter's entry points are
in :mod:`gateway.translate.convert`."""
