"""The RPC layer: msgpack-RPC framing (`wire`), the protocol and its method table (`protocol`,
`methods`), one connection (`connection`), the listening socket (`server`) and where the socket
is (`paths`). Imports nothing of the rest of hermesd; `hermesctl` may import `wire`, `protocol`,
`methods` and `paths` (kept free of asyncio and typing at import time)."""
