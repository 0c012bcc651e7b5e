"""Format translation between the client APIs (docs/translation.md); the attempter's entry
points are in :mod:`gateway.translate.convert`."""
