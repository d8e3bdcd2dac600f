"""The session store: SQLite in `$HERMES_HOME/state.db` — the file and its migrations
(`dbfile`, `migrations`), the one thread that owns the connection (`dbthread`), sessions and
messages (`sessions.SessionStore`), full-text search (`search`) and what the model is sent of a
session (`history`). Imports nothing of the rest of hermesd."""
