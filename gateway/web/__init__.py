"""The HTTP-facing layer: serving clients (app, the gateway's state, the drain, the policy
set's environment, routes, handlers, answers, admin, the connection guard, the policy
watcher, request shapes) and the worker processes."""
