"""Pure stream framing: SSE events and what they mean (sse), what the client was sent
(transcript), the resumed text against it (overlap), splicing a resumed or continued
stream into it (splice) and how a segment ended (verdict). The live relay that reads
and writes streams is ``gateway/live/relay.py``, beside the proxy."""
