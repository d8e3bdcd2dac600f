"""One streamed chat completion against an OpenAI-compatible endpoint: the client and its retries
(`client`), what a failure is (`errors`), the event stream folded into one message (`stream`)
and the JSON of the hot path (`fastjson`). Imports nothing of the rest of hermesd."""
