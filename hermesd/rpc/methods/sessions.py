"""RPC declarations of the session.* methods (see hermesd.rpc.protocol)."""

from __future__ import annotations

from hermesd.rpc.protocol import Access, MethodSpec, Param, declare

_SID = Param("session_id", "str", required=True, doc="session id (a unique prefix of one will do)")

declare(
    MethodSpec(
        "session.create",
        "Create an empty session.",
        (
            Param("title", "str", doc="title (default: derived from the first message)"),
            Param("model", "str", doc="model for this session (default: model.default)"),
            Param("platform", "str", doc='where the session comes from (default "cli")'),
            Param("attach", "bool", doc="also attach the caller (default true)"),
            Param(
                "history",
                "array",
                doc="earlier messages [{role: user|assistant, content}] stored first (HTTP door)",
            ),
        ),
        "session",
        access=Access.ANY,
    )
)
declare(
    MethodSpec(
        "session.list",
        "Sessions, most recently updated first, a page at a time.",
        (
            Param("limit", "int", doc="page size, 1-1000 (default 50)"),
            Param("before", "str", doc="the next_cursor of the previous page"),
        ),
        "{sessions: [session], next_cursor}",
        access=Access.ANY,
    )
)
declare(
    MethodSpec(
        "session.get",
        "One session, with whether a turn is running.",
        (_SID,),
        "session + {running, turn_id, attached}",
        access=Access.SESSION,
    )
)
declare(
    MethodSpec(
        "session.history",
        "Stored messages of a session, in order; one answer holds about 6 MiB at most (more:"
        " true says some were left out: ask again after the last seq).",
        (
            _SID,
            Param("limit", "int", doc="only the newest N messages"),
            Param("after_seq", "int", doc="only messages after this sequence number"),
        ),
        "{messages: [message], more}",
        access=Access.SESSION,
    )
)
declare(
    MethodSpec(
        "session.rename",
        "Set a session's title.",
        (_SID, Param("title", "str", required=True, doc="new title; empty clears it")),
        "session",
        access=Access.SESSION,
    )
)
declare(
    MethodSpec(
        "session.delete",
        "Delete a session and its messages (stops its turn).",
        (_SID,),
        "{deleted: true}",
        access=Access.SESSION,
    )
)
declare(
    MethodSpec(
        "session.prune",
        "Delete the caller's sessions not updated for a while and/or without messages "
        "(a running session is kept); root prunes everyone's.",
        (
            Param("older_than_s", "number", doc="only sessions not updated for this many seconds"),
            Param("empty", "bool", doc="only sessions without messages"),
            Param("dry_run", "bool", doc="only say which sessions would go"),
        ),
        "{deleted: [session id], dry_run}",
        access=Access.PERSON,
    )
)
declare(
    MethodSpec(
        "session.fork",
        "Copy a session up to a message into a new session.",
        (
            _SID,
            Param("upto_message_id", "int", doc="last message to copy (default: all)"),
            Param("title", "str", doc="title of the new session"),
        ),
        "session",
        access=Access.SESSION,
    )
)
declare(
    MethodSpec(
        "session.search",
        "Full-text search over all messages (FTS5), best first.",
        (
            Param("query", "str", required=True, doc="words to find"),
            Param("limit", "int", doc="most hits, 1-200 (default 20)"),
            Param("session_id", "str", doc="search only this session"),
        ),
        "{hits: [{message_id, session_id, session_title, role, snippet, created_at}]}",
        access=Access.SESSION,
    )
)
declare(
    MethodSpec(
        "session.reset",
        "The /new semantics: a fresh session for this client.",
        (Param("session_id", "str", doc="the session being left (fires on_session_reset)"),),
        "session",
        access=Access.SESSION,
    )
)
declare(
    MethodSpec(
        "session.attach",
        "Receive this session's events on this connection (and those missed since after_seq).",
        (
            _SID,
            Param("after_seq", "int", doc="the seq of the last event seen: replay the newer ones"),
        ),
        "session + {running, turn_id, attached, event_seq, clients, missed?, missed_complete?}",
        access=Access.SESSION,
    )
)
declare(
    MethodSpec(
        "session.detach",
        "Stop receiving this session's events.",
        (_SID,),
        "{detached: bool}",
        access=Access.SESSION,
    )
)
declare(
    MethodSpec(
        "session.send",
        "Start a turn: the user's message goes to the model (attaches the caller).",
        (
            _SID,
            Param("message", "str", required=True, doc="the user's message"),
            Param(
                "images",
                "array",
                doc="images with the message: bytes, a data: URL, {data: bytes} or {url}",
            ),
            Param("wait", "bool", doc="reply only when the turn has finished (default false)"),
            Param("platform", "str", doc="the client's platform, for plugins (default cli)"),
            Param(
                "system",
                "str",
                doc="text added to the system prompt for this turn only (never stored)",
            ),
        ),
        "{turn_id} or, with wait, the turn result {turn_id, status, final_text, error, ...}",
        access=Access.SESSION,
    )
)
declare(
    MethodSpec(
        "session.cancel",
        "Stop the running turn of a session cleanly.",
        (_SID,),
        "{cancelled: bool, turn_id}",
        access=Access.SESSION,
    )
)
declare(
    MethodSpec(
        "session.undo",
        "Take the last turn out of what the model is sent (the stored record keeps it).",
        (_SID,),
        "{undone: [message_id], user_message, user_images}",
        access=Access.SESSION,
    )
)
declare(
    MethodSpec(
        "session.compress",
        "Compact the session now with its context engine (the stored messages all stay).",
        (_SID, Param("focus", "str", doc="what the summary should keep most of")),
        "{compacted, engine, replaced, messages_before, messages_after, why_not?, context}",
        access=Access.SESSION,
    )
)
