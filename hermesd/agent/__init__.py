"""The agent: one turn of the OpenAI tool-calling loop (`loop.AgentLoop`) and the session.*
methods that start, stream and cancel turns (`sessions.SessionService`)."""
