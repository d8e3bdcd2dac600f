"""The HTTP door: an OpenAI-compatible API and a session API over the same RPC methods."""
