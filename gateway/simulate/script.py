"""``simulate``'s script: one outcome per upstream call, in order (see the package doc)."""

from __future__ import annotations

from dataclasses import dataclass

import orjson

from gateway.errors import Category

_MESSAGES = {
    429: ("rate_limit_exceeded", "Rate limit reached for requests"),
    500: ("server_error", "The server had an error while processing your request."),
    502: ("bad_gateway", "Bad gateway"),
    503: ("server_is_overloaded", "The server is overloaded, please try again later."),
    529: ("overloaded_error", "Overloaded"),
    401: ("invalid_api_key", "Incorrect API key provided"),
    400: ("invalid_request_error", "Invalid request"),
}


@dataclass(frozen=True, slots=True)
class Step:
    status: int  # 0 for transport failures
    headers: dict[str, str]
    body: bytes
    transport: Category | None = None
    label: str = ""
    fault: str | None = None  # 2xx: length, cut, stall, badchunk, error, diverge
    at: int = 0  # where a stream fault happens (characters, or the chunk)


STREAM_FAULTS = ("cut", "stall", "badchunk", "error", "diverge")


def parse_script(script: str) -> list[Step]:
    """``"429:ra=3,500,200"`` -> steps; raises ValueError with the offending item."""
    steps = []
    for item in (s.strip() for s in script.split(",")):
        if not item:
            continue
        head, _, opts = item.partition(":")
        if head in ("timeout", "reset"):
            cat = Category.timeout if head == "timeout" else Category.connection
            steps.append(Step(0, {}, b"", cat, head))
            continue
        if not head.isdigit() or not 100 <= int(head) <= 599:
            raise ValueError(f"script item {item!r}: expected a status, 'timeout' or 'reset'")
        status, headers = int(head), {}
        if status < 300:
            steps.append(_success(item, opts))
            continue
        code, message = _MESSAGES.get(status, ("error", f"HTTP {status}"))
        for opt in filter(None, opts.split(";") if ";" in opts else opts.split(":")):
            key, _, value = opt.partition("=")
            if key == "ra":
                headers["retry-after"] = value
            elif key == "ms":
                headers["retry-after-ms"] = value
            elif key == "code":
                code = value
            else:
                raise ValueError(f"script item {item!r}: unknown option {key!r} (ra, ms, code)")
        body = orjson.dumps({"error": {"message": message, "type": code, "code": code}})
        steps.append(Step(status, headers, body, None, item))
    return steps


def _success(item: str, opts: str) -> Step:
    """A 2xx item: plain, ``length``, or a stream's ``diverge``, ``cut@N``,
    ``stall@N``, ``badchunk@N`` or ``error@N``."""
    if not opts:
        return Step(int(item.partition(":")[0]), {}, b"", label=item)
    fault, sep, at = opts.partition("@")
    if opts in ("length", "diverge"):
        return Step(200, {}, b"", label=item, fault=opts)
    if fault in STREAM_FAULTS and sep and at.isdigit():
        return Step(200, {}, b"", label=item, fault=fault, at=int(at))
    raise ValueError(
        f"script item {item!r}: a 2xx takes length, cut@N, stall@N, badchunk@N or error@N"
    )


def json_answer(step: Step, n: int) -> bytes:
    """The chat completion a 2xx item answers a JSON request with (``length``: cut)."""
    cut = step.fault == "length"
    message = {"role": "assistant", "content": f"part {n} of the simulated answer. "}
    return orjson.dumps(
        {
            "id": f"chatcmpl-sim-{n}",
            "object": "chat.completion",
            "choices": [
                {"index": 0, "message": message, "finish_reason": "length" if cut else "stop"}
            ],
            "usage": {"prompt_tokens": 10, "completion_tokens": 10},
        }
    )
