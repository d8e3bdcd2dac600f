"""``hermesctl acp``: the Agent Client Protocol on stdio, bridged to hermesd.

An editor (Zed, or any ACP host) starts ``hermesctl acp`` and speaks JSON-RPC to it over stdin
and stdout; this module answers with the ``agent-client-protocol`` SDK and turns each ACP call
into the daemon's socket methods: ``session/new`` is ``session.create``, ``session/prompt``
``session.send`` with the turn's ``session.event`` notifications streamed back as
``session/update``, ``session/cancel`` ``session.cancel``, ``session/load`` ``session.attach`` plus
``session.history`` replayed, ``session/list`` ``session.list``, fork/resume/close
``session.fork``/``session.attach``/``session.detach``; a prompt naming a slash command runs it
with ``command.run`` (``hermesctl.acp_commands``); ``session/set_mode`` is the session's
approval mode, ``approvals.mode`` (``hermesctl.acp_modes``); the editor's MCP servers go to
``mcp.session_add`` (``hermesctl.acp_mcp``). The daemon's
``approval.request`` becomes ``session/request_permission``; when the approval is answered
elsewhere (``hermesctl chat`` on the same session, ``hermesctl approvals``) the editor's request
is withdrawn with ``$/cancel_request``. The daemon keeps sessions, approvals and replay: what
this bridge holds (open tool calls, turns being waited for) is rebuilt from the daemon's events.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import sys
from collections.abc import Callable
from typing import Any

import acp
from acp import schema
from acp.helpers import update_current_mode

from hermesctl import acp_commands, acp_mcp, acp_modes
from hermesctl.acp_events import EventTranslator, history_updates, tool_kind
from hermesctl.acp_link import DaemonLink
from hermesctl.client import Client
from hermesd.rpc.protocol import Codes, RpcError

log = logging.getLogger("hermesctl.acp")

#: hermesd's approval choices as ACP permission options: `session` and `always` both allow
#: from now on (for the session, or remembered in state.db), which ACP calls allow_always.
PERMISSION_OPTIONS: dict[str, tuple[str, Any]] = {
    "once": ("Allow once", "allow_once"),
    "session": ("Allow for this session", "allow_always"),
    "always": ("Always allow (remembered)", "allow_always"),
    "deny": ("Deny", "reject_once"),
}
APPROVAL_META = "hermesd/approval_id"
#: the longest line the editor may send (the SDK's own default: a prompt can embed files)
LINE_LIMIT = 50 * 1024 * 1024
STOP_REASONS = {"completed": "end_turn", "cancelled": "cancelled"}


def _rpc_to_acp(err: RpcError) -> acp.RequestError:
    """A daemon error as the JSON-RPC error the editor is shown."""
    if err.code == Codes.NOT_FOUND:
        return acp.RequestError(-32002, err.message, {"hermesd_code": err.code})
    if err.code == Codes.INVALID_PARAMS:
        return acp.RequestError.invalid_params({"details": err.message})
    return acp.RequestError(-32603, err.message, {"hermesd_code": err.code})


class HermesAgent:
    """The ACP agent: each method is one or two daemon calls."""

    def __init__(self, client: Client) -> None:
        self._client = client
        self._link: DaemonLink | None = None
        self._conn: acp.Client | None = None
        self.events = EventTranslator(self._send_update)
        self._sending: set[str] = set()  # sessions whose session.send is in flight
        self._own_turns: dict[str, str] = {}  # session -> the turn this bridge's prompt started
        self._finished: dict[str, dict[str, Any]] = {}  # turn id -> its turn.finished event
        self._waiting: dict[str, asyncio.Future[dict[str, Any]]] = {}
        #: approval id -> the task asking the editor; the JSON-RPC id of its request
        self._asking: dict[str, asyncio.Task[schema.RequestPermissionResponse]] = {}
        self._request_ids: dict[str, int | str] = {}
        self._asking_calls: dict[str, tuple[str, str | None]] = {}  # approval -> session, call
        self._updates: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()
        self.write_line: Callable[[dict[str, Any]], None] | None = None

    # --- wiring ----------------------------------------------------------------------------

    def on_connect(self, conn: acp.Client) -> None:
        """The SDK hands over the editor's side of the connection."""
        self._conn = conn

    async def link(self) -> DaemonLink:
        """Take over the daemon connection (called once, before serving)."""
        self._link = await DaemonLink.open(self._client, self._on_notification, self._on_request)
        return self._link

    def observe(self, event: Any) -> None:
        """SDK stream observer: remember the JSON-RPC id of each permission request we send,
        so that it can be withdrawn when the approval is answered elsewhere."""
        message = event.message
        if message.get("method") != "session/request_permission" or "id" not in message:
            return
        meta = (message.get("params") or {}).get("_meta") or {}
        approval_id = meta.get(APPROVAL_META)
        if approval_id:
            self._request_ids[str(approval_id)] = message["id"]

    async def pump_updates(self) -> None:
        """Send session/update notifications in the order the daemon's events came."""
        while True:
            session_id, update = await self._updates.get()
            if isinstance(update, asyncio.Future):  # a _flush() marker
                if not update.done():
                    update.set_result(None)
                continue
            if self._conn is not None:
                try:
                    await self._conn.session_update(session_id=session_id, update=update)
                except ConnectionError:  # the editor went away; serve() ends with it
                    return
                except Exception:  # one bad update must not stop the others
                    log.exception("session/update for %s failed", session_id)

    def _send_update(self, session_id: str, update: Any) -> None:
        self._updates.put_nowait((session_id, update))

    async def _call(self, method: str, params: dict[str, Any]) -> Any:
        assert self._link is not None
        try:
            return await self._link.call(method, params)
        except RpcError as err:
            raise _rpc_to_acp(err) from None

    # --- what the daemon sends -------------------------------------------------------------

    def _on_notification(self, method: str, params: dict[str, Any]) -> None:
        if method == "approval.resolved":
            self._resolved_elsewhere(params)
            return
        if method != "session.event":
            return
        sid = str(params.get("session_id") or "")
        kind = params.get("type")
        own = sid in self._sending or self._own_turns.get(sid) == params.get("turn_id")
        if kind == "turn.started" and own:
            params = {**params, "user_message": None}  # the editor shows its own prompt
        self.events.translate(params)
        turn_id = str(params.get("turn_id") or "")
        if kind == "turn.finished":
            waiter = self._waiting.pop(turn_id, None)
            if waiter is not None and not waiter.done():
                waiter.set_result(params)
            elif own:  # finished before its prompt() learnt the turn id: kept for it
                self._finished[turn_id] = params
        elif kind == "session.deleted":
            waiter = self._waiting.pop(self._own_turns.pop(sid, ""), None)
            if waiter is not None and not waiter.done():
                waiter.set_result({"status": "failed", "error": "the session was deleted"})

    async def _on_request(self, method: str, params: dict[str, Any]) -> Any:
        if method != "approval.request":
            raise RpcError(Codes.METHOD_NOT_FOUND, f"hermesctl acp does not handle '{method}'")
        return await self._ask_permission(params)

    async def _ask_permission(self, request: dict[str, Any]) -> dict[str, Any]:
        """Ask the editor about one hermesd approval; its answer is the daemon's answer."""
        assert self._conn is not None
        approval_id = str(request.get("id") or "")
        sid = str(request.get("session_id") or "")
        call_id = self.events.open_call_for(sid, str(request.get("tool") or ""))
        command = str(request.get("command") or "")
        title = f"{request.get('tool')}: {request.get('description') or command}"
        tool_call = schema.ToolCallUpdate(
            tool_call_id=call_id or f"approval-{approval_id}",
            title=title,
            kind=tool_kind(str(request.get("tool") or "")),
            status="pending",
            raw_input={"command": command, "warnings": request.get("warnings") or []},
        )
        choices = [
            c for c in request.get("choices") or PERMISSION_OPTIONS if c in PERMISSION_OPTIONS
        ]
        options = [
            schema.PermissionOption(
                option_id=c, name=PERMISSION_OPTIONS[c][0], kind=PERMISSION_OPTIONS[c][1]
            )
            for c in choices
        ]
        asking = asyncio.ensure_future(
            self._conn.request_permission(
                session_id=sid, tool_call=tool_call, options=options, **{APPROVAL_META: approval_id}
            )
        )
        self._asking[approval_id] = asking
        self._asking_calls[approval_id] = (sid, call_id)
        try:
            answer = await asking
        except asyncio.CancelledError:
            if asking.cancelled():  # withdrawn: answered elsewhere (the daemon has its answer)
                raise RpcError(Codes.CONFLICT, "answered elsewhere") from None
            raise
        finally:
            self._asking.pop(approval_id, None)
            self._request_ids.pop(approval_id, None)
            self._asking_calls.pop(approval_id, None)
        outcome = answer.outcome
        if isinstance(outcome, schema.AllowedOutcome) and outcome.option_id in choices:
            if call_id and outcome.option_id != "deny":
                self._send_update(sid, acp.update_tool_call(call_id, status="in_progress"))
            return {"choice": outcome.option_id}
        return {"choice": "deny", "reason": "the permission request was cancelled in the editor"}

    def _resolved_elsewhere(self, params: dict[str, Any]) -> None:
        approval_id = str(params.get("id") or "")
        asking = self._asking.get(approval_id)
        if asking is None or asking.done():
            return
        request_id = self._request_ids.get(approval_id)
        asking.cancel()
        if request_id is not None and self.write_line is not None:
            # the protocol's way to withdraw a request the agent sent; the SDK has no call
            # for it (it prefixes extension methods with "_"), so it goes out as a raw line
            self.write_line(
                {
                    "jsonrpc": "2.0",
                    "method": "$/cancel_request",
                    "params": {"requestId": request_id},
                }
            )
        sid, call_id = self._asking_calls.pop(approval_id, ("", None))
        if call_id and params.get("choice") in ("once", "session", "always"):
            self._send_update(sid, acp.update_tool_call(call_id, status="in_progress"))

    # --- ACP methods -----------------------------------------------------------------------

    async def initialize(
        self,
        protocol_version: int,
        client_capabilities: schema.ClientCapabilities | None = None,
        client_info: schema.Implementation | None = None,
        **kwargs: Any,
    ) -> schema.InitializeResponse:
        """Say what this bridge really does."""
        import hermesd

        return schema.InitializeResponse(
            protocol_version=min(protocol_version, acp.PROTOCOL_VERSION),
            agent_capabilities=schema.AgentCapabilities(
                load_session=True,
                # session.send takes text and images (the daemon checks them); text resources
                # the editor embeds are passed on inside the message; audio is refused
                prompt_capabilities=schema.PromptCapabilities(
                    image=True, audio=False, embedded_context=True
                ),
                # the editor's MCP servers run in the daemon (hermesctl.acp_mcp): stdio and both
                mcp_capabilities=schema.McpCapabilities(http=True, sse=True),
                session_capabilities=schema.SessionCapabilities(
                    list=schema.SessionListCapabilities(),
                    fork=schema.SessionForkCapabilities(),
                    resume=schema.SessionResumeCapabilities(),
                    close=schema.SessionCloseCapabilities(),
                ),
            ),
            agent_info=schema.Implementation(
                name="hermesd", title="hermesd", version=hermesd.__version__
            ),
            auth_methods=[],
        )

    async def authenticate(self, method_id: str, **kwargs: Any) -> None:
        """No authentication: the daemon's socket permissions decide who may talk to it."""
        raise acp.RequestError.invalid_params({"details": "hermesd needs no authentication"})

    async def new_session(
        self, cwd: str, mcp_servers: list[Any] | None = None, **kwargs: Any
    ) -> schema.NewSessionResponse:
        """A new daemon session, attached to this bridge."""
        session = await self._call("session.create", {"platform": "acp"})
        await acp_mcp.connect(self._call, session["id"], mcp_servers)
        await self._advertise(session["id"])
        modes = await acp_modes.state(self._call, session["id"])
        return schema.NewSessionResponse(session_id=session["id"], modes=modes)

    async def _advertise(self, session_id: str) -> None:
        """Tell the editor which slash commands the session has."""
        listed = await self._call("commands.list", {})
        self._send_update(session_id, acp_commands.available(listed.get("commands") or []))

    async def load_session(
        self, cwd: str, session_id: str, mcp_servers: list[Any] | None = None, **kwargs: Any
    ) -> schema.LoadSessionResponse:
        """Attach to a stored session and replay its conversation as session/update."""
        session = await self._call("session.attach", {"session_id": session_id})
        sid = session["id"]
        await acp_mcp.connect(self._call, sid, mcp_servers)
        after: int | None = None
        while True:
            params: dict[str, Any] = {"session_id": sid}
            if after is not None:
                params["after_seq"] = after
            page = await self._call("session.history", params)
            messages = page.get("messages") or []
            for update in history_updates(messages):
                self._send_update(sid, update)
            if not page.get("more") or not messages:
                break
            after = messages[-1]["seq"]
        await self._advertise(sid)
        await self._flush()  # the replay comes before the answer, as ACP asks
        return schema.LoadSessionResponse(modes=await acp_modes.state(self._call, sid))

    async def resume_session(
        self, session_id: str, cwd: str, mcp_servers: list[Any] | None = None, **kwargs: Any
    ) -> schema.ResumeSessionResponse:
        """Attach to a stored session without replaying it (the editor has it already)."""
        await self._call("session.attach", {"session_id": session_id})
        await acp_mcp.connect(self._call, session_id, mcp_servers)
        await self._advertise(session_id)
        return schema.ResumeSessionResponse(modes=await acp_modes.state(self._call, session_id))

    async def fork_session(
        self, session_id: str, cwd: str, mcp_servers: list[Any] | None = None, **kwargs: Any
    ) -> schema.ForkSessionResponse:
        """A copy of the session's conversation as a new session (``session.fork``), attached."""
        forked = await self._call("session.fork", {"session_id": session_id})
        await self._call("session.attach", {"session_id": forked["id"]})
        await acp_mcp.connect(self._call, forked["id"], mcp_servers)
        await self._advertise(forked["id"])
        modes = await acp_modes.state(self._call, forked["id"])
        return schema.ForkSessionResponse(session_id=forked["id"], modes=modes)

    async def set_session_mode(
        self, session_id: str, mode_id: str, **kwargs: Any
    ) -> schema.SetSessionModeResponse:
        """The session's approval mode (`hermesctl.acp_modes`); the daemon may refuse it."""
        now = await acp_modes.set_mode(self._call, session_id, mode_id)
        self._send_update(session_id, update_current_mode(now))
        return schema.SetSessionModeResponse()

    async def close_session(self, session_id: str, **kwargs: Any) -> schema.CloseSessionResponse:
        """Stop following the session; a turn this editor started is cancelled (ACP asks for
        it), a turn another client started keeps running."""
        if self._own_turns.get(session_id) in self._waiting:
            await self._call("session.cancel", {"session_id": session_id})
        await self._call("session.detach", {"session_id": session_id})
        return schema.CloseSessionResponse()

    async def list_sessions(
        self, cwd: str | None = None, cursor: str | None = None, **kwargs: Any
    ) -> schema.ListSessionsResponse:
        """The daemon's sessions, a page at a time, most recently updated first."""
        params: dict[str, Any] = {"limit": 50}
        if cursor:
            params["before"] = cursor
        page = await self._call("session.list", params)
        here = os.getcwd()
        sessions = [
            schema.SessionInfo(
                session_id=s["id"],
                cwd=s.get("cwd") or here,
                title=s.get("title") or None,
                updated_at=_iso(s.get("updated_at")),
            )
            for s in page.get("sessions") or []
            if not cwd or not s.get("cwd") or s.get("cwd") == cwd
        ]
        return schema.ListSessionsResponse(sessions=sessions, next_cursor=page.get("next_cursor"))

    async def prompt(
        self, session_id: str, prompt: list[Any], **kwargs: Any
    ) -> schema.PromptResponse:
        """One turn: send the prompt, stream its events, answer with its stop reason."""
        message, images = prompt_content(prompt)
        listed = await self._call("commands.list", {}) if message.startswith("/") else {}
        command = acp_commands.named(message, listed.get("commands") or []) if not images else None
        if command in acp_commands.EDITOR_DOES_IT:
            note = f"/{command} does not apply here: {acp_commands.EDITOR_DOES_IT[command]}."
            return await self._say(session_id, note)
        self._sending.add(session_id)
        try:
            if command is not None:
                ran = await self._call("command.run", {"line": message, "session_id": session_id})
                if ran.get("action") != "turn" or not ran.get("turn_id"):
                    return await self._say(session_id, str(ran.get("output") or ""))
                sent = ran  # /retry and the like start a turn: follow it as a prompt's
            else:
                params: dict[str, Any] = {
                    "session_id": session_id,
                    "message": message,
                    "platform": "acp",
                }
                if images:
                    params["images"] = images
                sent = await self._call("session.send", params)
            turn_id = str(sent["turn_id"])
            self._own_turns[session_id] = turn_id
        finally:  # kept until the turn id is known: its turn.started may come either side
            self._sending.discard(session_id)
        return await self._follow(turn_id)

    async def _say(self, session_id: str, text: str) -> schema.PromptResponse:
        """Answer a prompt with text of our own (a slash command's output), no turn."""
        if text:
            self._send_update(session_id, acp.update_agent_message_text(text))
        await self._flush()
        return schema.PromptResponse(stop_reason="end_turn")

    async def _follow(self, turn_id: str) -> schema.PromptResponse:
        """Wait for one of our turns to finish; the prompt's answer."""
        finished = self._finished.pop(turn_id, None)
        if finished is None:
            waiter: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
            self._waiting[turn_id] = waiter
            link = self._link
            assert link is not None
            gone: asyncio.Future[Any] = asyncio.ensure_future(link.closed.wait())
            await asyncio.wait([waiter, gone], return_when=asyncio.FIRST_COMPLETED)
            gone.cancel()
            if not waiter.done():
                self._waiting.pop(turn_id, None)
                raise acp.RequestError.internal_error({"details": "hermesd closed the connection"})
            finished = waiter.result()
        await self._flush()
        status = str(finished.get("status") or "failed")
        if status == "failed":
            detail = finished.get("error") or "the turn failed"
            raise acp.RequestError.internal_error({"details": str(detail)})
        stop: Any = STOP_REASONS.get(status, "end_turn")
        if finished.get("exit_reason") == "max_iterations":
            stop = "max_turn_requests"
        return schema.PromptResponse(stop_reason=stop, usage=_usage(finished.get("usage")))

    async def cancel(self, session_id: str, **kwargs: Any) -> None:
        """Stop the session's running turn (its prompt then ends with stop reason cancelled)."""
        try:
            await self._call("session.cancel", {"session_id": session_id})
        except acp.RequestError as err:  # a notification has no one to tell: the log does
            log.warning("session/cancel for %s: %s", session_id, err)

    async def _flush(self) -> None:
        """Wait until every update queued so far was written (before a prompt's answer)."""
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._updates.put_nowait(("", done))
        await done


def prompt_content(blocks: list[Any]) -> tuple[str, list[dict[str, str]]]:
    """The prompt's content blocks as ``session.send``'s text and images (data URLs; the
    daemon checks what they really are)."""
    parts: list[str] = []
    images: list[dict[str, str]] = []
    for block in blocks:
        if isinstance(block, schema.TextContentBlock):
            parts.append(block.text)
        elif isinstance(block, schema.ImageContentBlock):
            images.append({"url": f"data:{block.mime_type};base64,{block.data}"})
        elif isinstance(block, schema.ResourceContentBlock):
            parts.append(f"[{block.name}]({block.uri})")
        elif isinstance(block, schema.EmbeddedResourceContentBlock):
            resource = block.resource
            if not isinstance(resource, schema.TextResourceContents):
                raise acp.RequestError.invalid_params(
                    {"details": f"binary resource {resource.uri}: hermesd takes text and images"}
                )
            parts.append(
                f"\n<context uri={json.dumps(resource.uri)}>\n{resource.text}\n</context>\n"
            )
        else:
            kind = getattr(block, "type", type(block).__name__)
            raise acp.RequestError.invalid_params(
                {"details": f"{kind} content is not supported: hermesd takes text and images"}
            )
    return "".join(parts), images


def _usage(counts: Any) -> schema.Usage | None:
    """The turn's token counts (``turn.finished``'s ``usage``) as ACP reports them."""
    if not isinstance(counts, dict):
        return None
    return schema.Usage(
        input_tokens=int(counts.get("prompt_tokens") or 0),
        output_tokens=int(counts.get("completion_tokens") or 0),
        total_tokens=int(counts.get("total_tokens") or 0),
    )


def _iso(value: Any) -> str | None:
    if not isinstance(value, int | float):
        return None
    import datetime

    return datetime.datetime.fromtimestamp(value, datetime.UTC).isoformat()


async def serve(client: Client) -> int:
    """Serve ACP on stdin/stdout until the editor or the daemon hangs up; the exit status."""
    agent = HermesAgent(client)
    link = await agent.link()
    reading = link.start()
    reader, writer = await acp.stdio_streams(limit=LINE_LIMIT)
    checked = asyncio.StreamReader(limit=LINE_LIMIT)
    agent.write_line = lambda obj: writer.write(json.dumps(obj).encode() + b"\n")
    filtering = asyncio.create_task(_reject_malformed(reader, checked, writer))
    pumping = asyncio.create_task(agent.pump_updates())
    serving = asyncio.create_task(
        # the unstable routes: session/fork, session/resume and session/close are there
        acp.run_agent(agent, writer, checked, observers=[agent.observe], use_unstable_protocol=True)  # type: ignore[arg-type]
    )
    await asyncio.wait([serving, reading], return_when=asyncio.FIRST_COMPLETED)
    status = 0
    if reading.done() and not serving.done():
        print("hermesctl acp: hermesd closed the connection", file=sys.stderr)
        status = 1
    for task in (serving, filtering, pumping, reading):
        task.cancel()
    with contextlib.suppress(asyncio.CancelledError, Exception):
        await asyncio.gather(serving, filtering, pumping, reading, return_exceptions=True)
    await link.close()
    return status


async def _reject_malformed(
    source: asyncio.StreamReader, sink: asyncio.StreamReader, out: asyncio.StreamWriter
) -> None:
    """Pass the editor's lines on; answer one that is not a JSON-RPC object with the JSON-RPC
    error for it (the SDK would only log it) and keep going."""

    def refuse(code: int, message: str) -> None:
        reply = {"jsonrpc": "2.0", "id": None, "error": {"code": code, "message": message}}
        out.write(json.dumps(reply).encode() + b"\n")

    try:
        while True:
            try:
                line = await source.readline()
            except ValueError:  # longer than the limit: the reader dropped what it held
                refuse(-32600, f"Invalid Request: a message over {LINE_LIMIT} bytes")
                continue
            if not line:
                return
            if line.strip():
                try:
                    message = json.loads(line)
                except ValueError:
                    refuse(-32700, "Parse error: the line is not JSON")
                    continue
                if not isinstance(message, dict):
                    refuse(-32600, "Invalid Request: not a JSON-RPC object")
                    continue
            sink.feed_data(line)
    finally:
        sink.feed_eof()
