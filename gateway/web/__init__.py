"""The HTTP-facing layer: serving clients (app, routes, handlers, answers, admin, the
connection guard, the policy watcher, request shapes) and the worker processes."""
