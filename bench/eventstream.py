"""What decoding a Bedrock event-stream frame costs against splitting the same SSE event.

    python bench/eventstream.py [--repeat N] [--no-instructions]

A Bedrock stream reaches the gateway as AWS event-stream frames, which
``gateway/formats/eventstream.py`` turns into the SSE events every other stream is made of;
an SSE stream's events go through ``gateway.formats.sse.Splitter`` instead. Per frame, for
a typical text delta of about ten words, in two shapes:

- an InvokeModelWithResponseStream ``chunk`` (an Anthropic ``content_block_delta``,
  base64 in ``{"bytes": ..., "p": ...}``) against the Anthropic SSE event it becomes;
- a ConverseStream ``contentBlockDelta`` against ``event: contentBlockDelta`` SSE;

each read alone (one frame per read, as a model's stream is read): the gateway's decoder
(``EventStreamSplitter``, the frame to its SSE event), botocore's decoder for comparison
(``EventStreamBuffer``, only reading each frame's headers and payload: what the gateway
does not use it for, see the module's docstring), and the SSE split of the same event; by:

- wall time: ``timeit``, the best of ``--repeat`` runs, ns per frame;
- instructions: this script under ``valgrind --tool=callgrind``, a run of N frames less a
  run of none, over N (start-up and imports cancel out); instructions do not move with the
  machine's load.

The extra instructions per frame are set against the gateway's whole cost of a relayed
SSE chunk (docs/performance.md, about 80k): the guard is a Bedrock chunk at most 1.2x an
SSE chunk, end to end.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import timeit
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

#: The gateway's instructions per relayed SSE chunk (docs/performance.md, 2026-12-03).
GATEWAY_PER_CHUNK = 80_000
GUARD = 1.2
TEXT = "The quick brown fox jumps over the lazy dog, again today"  # ten words
SHAPES = ("chunk", "converse")


def _inputs(shape: str) -> tuple[bytes, bytes]:
    """(the frame, the SSE event it becomes) of one text delta of ``shape``."""
    from gateway.formats.eventstream import EventStreamSplitter
    from gateway.testing.eventstream_frames import PADDING, chunk_frame, event_frame

    if shape == "chunk":
        ev = {"type": "content_block_delta", "index": 0,
              "delta": {"type": "text_delta", "text": TEXT}}  # fmt: skip
        frame = chunk_frame(ev, padding=PADDING[:23])
    else:
        payload = {"contentBlockIndex": 0, "delta": {"text": TEXT}}
        frame = event_frame("contentBlockDelta", payload, padding=PADDING[:7])
    (sse,) = EventStreamSplitter().feed(frame)
    return frame, sse


def _feeders(shape: str) -> dict[str, Callable[[], object]]:
    from botocore.eventstream import EventStreamBuffer

    from gateway.formats.eventstream import EventStreamSplitter
    from gateway.formats.sse import Splitter

    frame, sse = _inputs(shape)
    es, ss, buf = EventStreamSplitter(), Splitter(), EventStreamBuffer()

    def botocore_alone() -> None:
        buf.add_data(frame)
        for msg in buf:
            msg.headers, msg.payload  # noqa: B018 (what the splitter reads of a frame)

    return {"decoder": lambda: es.feed(frame), "botocore": botocore_alone,
            "sse": lambda: ss.feed(sse)}  # fmt: skip


def wall(repeat: int, n: int = 20_000) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for shape in SHAPES:
        out[shape] = {
            name: min(timeit.repeat(fn, number=n, repeat=repeat)) / n * 1e9
            for name, fn in _feeders(shape).items()
        }
    return out


def _loop(shape: str, which: str, n: int) -> None:
    """The body run under callgrind: ``n`` feeds of one shape."""
    fn = _feeders(shape)[which]
    for _ in range(n):
        fn()


def _callgrind(shape: str, which: str, n: int, tmp: Path) -> int:
    out = tmp / f"cg-{shape}-{which.replace(' ', '-')}-{n}.out"
    cmd = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", "--dump-line=no",
           sys.executable, __file__, "--loop", shape, which, str(n)]  # fmt: skip
    subprocess.run(cmd, check=True, capture_output=True)
    for line in out.read_text().splitlines():
        if line.startswith(("summary:", "totals:")):
            return int(line.split()[1])
    raise RuntimeError("callgrind wrote no totals")


def instructions(n: int = 3_000) -> dict[str, dict[str, float]]:
    """Per use: a run of ``n`` uses less a run of none (the same imports and set-up)."""
    out: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory() as d:
        for shape in SHAPES:
            base = _callgrind(shape, "sse", 0, Path(d))
            out[shape] = {
                which: (_callgrind(shape, which, n, Path(d)) - base) / n
                for which in ("decoder", "botocore", "sse")
            }
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repeat", type=int, default=7, help="timeit runs (the best is kept)")
    p.add_argument("--no-instructions", action="store_true", help="skip callgrind")
    p.add_argument("--loop", nargs=3, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.loop:
        _loop(args.loop[0], args.loop[1], int(args.loop[2]))
        return 0
    for shape, t in wall(args.repeat).items():
        es, bc, ss = t["decoder"], t["botocore"], t["sse"]
        print(f"{shape:9} wall: decoder {es:6.0f} ns/frame (botocore's EventStreamBuffer"
              f" {bc:6.0f}), sse split {ss:5.0f} ns/event, extra {es - ss:6.0f} ns")  # fmt: skip
    if args.no_instructions:
        return 0
    if not shutil.which("valgrind"):
        print("valgrind not found: no instruction counts (apt-get install valgrind)")
        return 0
    crossed = False
    for shape, ir in instructions().items():
        es, bc, ss = ir["decoder"], ir["botocore"], ir["sse"]
        ratio = (GATEWAY_PER_CHUNK + es - ss) / GATEWAY_PER_CHUNK
        crossed |= ratio > GUARD
        print(f"{shape:9} instructions: decoder {es / 1e3:5.1f}k/frame (botocore's"
              f" EventStreamBuffer {bc / 1e3:5.1f}k), sse split {ss / 1e3:4.1f}k/event,"
              f" extra {(es - ss) / 1e3:5.1f}k of the gateway's ~{GATEWAY_PER_CHUNK / 1e3:.0f}k"
              f" per SSE chunk: a Bedrock chunk ~{ratio:.2f}x (guard {GUARD}x)")  # fmt: skip
    return 1 if crossed else 0


if __name__ == "__main__":
    sys.exit(main())
