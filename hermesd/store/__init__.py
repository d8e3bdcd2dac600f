"""The session store: SQLite in `$HERMES_HOME/state.db` — the file, its migrations and the
store's errors (`dbfile`, `migrations`), the one thread that owns the connection (`dbthread`)
and the connection on it (`database`), and `facade.SessionStore`, which holds one table object
per concern: sessions (`session_rows`), messages (`messages`), compactions, full-text search
(`search`), usage, cron jobs (`cronjobs`), approval rules and memory (`memory_journal`); what
the model is sent of a session is `history`. Imports nothing of the rest of hermesd."""
