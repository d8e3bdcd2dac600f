"""`SessionModes`: a session's own approval mode, chosen by a client over ``approvals.mode``.

``approvals.mode`` in config.yaml (``manual`` or ``off``) holds for every session; a client may
set one session's mode (``approvals.mode`` method; an editor's ACP session mode): ``manual``
asks as usual (even when the configured mode is ``off``), ``deny`` refuses at once what would
need asking (nobody is asked: for unattended work), ``off`` lets dangerous commands run unasked
(``approvals.require`` tools and a plugin's approve request still ask; the hard floor and
``approvals.deny`` still refuse). The choice lives in memory: a daemon restart, a reset or a
deletion of the session returns it to the configured mode.
"""

from __future__ import annotations

MODES = ("manual", "deny", "off")
DENY_MODE_TEXT = (
    "BLOCKED: {what} needs approval, and this session does not ask for it (its approval "
    "mode is deny). The user has NOT consented to this action."
)


class SessionModes:
    """Part of `ApprovalBroker`: each session's mode, and forgetting a session's choices."""

    mode: str  # approvals.mode, from the configuration
    session_modes: dict[str, str]
    _session_keys: dict[tuple[str, int], set[str]]

    def session_mode(self, session_id: str) -> str:
        """The mode that holds for ``session_id``: its own, else the configured one."""
        return self.session_modes.get(session_id, self.mode)

    def set_session_mode(self, session_id: str, mode: str) -> None:
        """Set one session's mode (one of `MODES`)."""
        if mode not in MODES:
            raise ValueError(f"approval mode must be one of {', '.join(MODES)}, not {mode!r}")
        self.session_modes[session_id] = mode

    def forget_session(self, session_id: str) -> None:
        """Drop the "session" answers and the mode of a session (deleted or reset)."""
        for key in [k for k in self._session_keys if k[0] == session_id]:
            del self._session_keys[key]
        self.session_modes.pop(session_id, None)
