"""The stream machinery: SSE framing and what an event means (sse), the relay, what the
client was sent (transcript), the resumed text against it (overlap) and splicing a
resumed or continued stream into it (splice)."""
