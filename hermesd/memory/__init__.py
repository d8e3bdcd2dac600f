"""Memory: MEMORY.md and USER.md, the ``memory`` tool, the frozen prompt snapshot, and the
external memory provider ``memory.provider`` selects.

files.py (the two files on disk: locking, atomic writes, the drift guard), edits.py (add,
replace, remove and batches with the reference's results), snapshot.py (the prompt blocks),
pending.py (writes staged for a person when ``memory.write_approval`` is on), tool.py (the tool,
registered like any plugin tool), commands.py (``/memory``), builtin.py (staging, redaction,
announcements, the per-session snapshot), service.py (``memory.*`` RPC), threats.py
(prompt-injection checks of what is written). Providers: providers.py (an instance per session,
its lifecycle and switches), provider_source.py, provider_calls.py, provider_journal.py,
provider_cli.py. Nothing here runs file I/O on the event loop.
"""
