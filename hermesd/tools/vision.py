"""The ``vision_analyze`` tool (toolset ``vision``): a vision model describes an image.

``image_url`` names the image: a file in the session's workspace (relative to it, or absolute
inside it; read with the file tools' protections), an ``http(s)://`` URL, a ``data:`` URL, or
``attachment:N`` / ``attachment:last``, the N-th image people attached in this conversation
(``session.send`` images). An image is at most `MAX_BYTES`; its type is sniffed (PNG, JPEG, GIF,
WebP), never taken from a name or a header. A URL is fetched the way a tool's process reaches
the network (``sandbox.network``): refused when it is ``off``, through the egress proxy under
``allowlist`` (a host off ``sandbox.allowed_domains`` is asked about like any tool's), directly
when ``on``.

The model asked is ``auxiliary.vision`` (``base_url``, ``model``, ``api_key``, ``timeout``,
``temperature``, ``download_timeout``; read at each call, so a reload applies at once) when it
names an endpoint, else the main model (with
``auxiliary.vision.model`` when set), through the agent's own completion path (usage, budgets,
request hooks). The result is the reference's: ``{success: true, analysis}``, or ``{success:
false, error, analysis}`` saying what went wrong. The analysis of an image nobody in the
conversation attached (a file, a URL, a data: URL) comes inside the untrusted-data marker
(`hermesd.untrusted`): text in an image is not an instruction.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hermesd import untrusted
from hermesd.model.client import Completion, ModelClient, ModelSettings
from hermesd.runtime.auxiliary import AuxiliaryCall, run_auxiliary
from hermesd.runtime.hooks import HookBus
from hermesd.store.images import Image, ImageError, checked, from_data_url
from hermesd.tools.arguments import BadArgs
from hermesd.tools.file_access import read_bytes
from hermesd.tools.registry import BUILTIN

if TYPE_CHECKING:
    from hermesd.sandbox.confine import Sandbox
    from hermesd.store.facade import SessionStore
    from hermesd.tools.builtin_files import BuiltinFileTools
    from hermesd.tools.registry import ToolRegistry

log = logging.getLogger(__name__)

TOOLSET = "vision"
MAX_BYTES = 10 * 1024 * 1024
MAX_TOKENS = 2000
PROMPT = "Describe this image fully and precisely, then answer this question about it:\n\n"
Complete = Callable[..., Awaitable[Completion]]

SCHEMA: dict[str, Any] = {
    "name": "vision_analyze",
    "description": (
        "Look at an image with a vision model and get back a description of it and an answer "
        "to your question. The image may be a file in the workspace, an http(s) URL, a data: "
        "URL, or attachment:N / attachment:last for an image the user attached to this "
        "conversation (N counts from 1, oldest first)."
    ),
    "parameters": {
        "type": "object",
        "properties": {
            "image_url": {
                "type": "string",
                "description": "A workspace file path, an http(s) or data: URL, or "
                "attachment:N / attachment:last.",
            },
            "question": {
                "type": "string",
                "description": "What you want to know about the image.",
            },
        },
        "required": ["image_url", "question"],
    },
}


_CLOSING: set[asyncio.Task[None]] = set()  # clients of a replaced endpoint, being closed


class VisionError(Exception):
    """The image could not be had or analysed; the text is what the model reads."""


def failure(message: str) -> dict[str, Any]:
    """The reference's error shape."""
    return {
        "success": False,
        "error": f"Error analyzing image: {message}",
        "analysis": f"The image could not be analyzed: {message}",
    }


class VisionTool:
    """``vision_analyze`` over the store (attachments), the file tools' guard and workspace,
    the sandbox's network setting and a completion path."""

    def __init__(
        self,
        store: SessionStore,
        files: BuiltinFileTools,
        sandbox: Sandbox,
        complete: Complete,
        config: Callable[[], Any],
    ) -> None:
        self.store, self.files, self.sandbox, self.complete = store, files, sandbox, complete
        self.config = config  # the daemon's current settings: a reload applies to the next call
        self._client: ModelClient | None = None
        self.hooks: HookBus | None = None  # a separate endpoint's call is auxiliary too
        self._read(config())

    def _read(self, config: Any) -> None:
        """Take ``auxiliary.vision``; a changed endpoint gets a new client."""
        value = config.get("auxiliary.vision")
        aux = value if isinstance(value, dict) else {}
        self.model = str(aux.get("model") or "") or None
        self.base_url = str(aux.get("base_url") or "") or None
        self.api_key = str(aux.get("api_key") or "") or None
        self.timeout = float(aux.get("timeout") or 120)
        temperature = aux.get("temperature")
        self.temperature = float(temperature) if isinstance(temperature, (int, float)) else 0.1
        self.download_timeout = float(aux.get("download_timeout") or 30)
        endpoint = (self.base_url, self.api_key, self.timeout)
        if self._client is not None and self._client.settings.endpoint != endpoint:
            old, self._client = self._client, None
            task = asyncio.get_running_loop().create_task(old.aclose())
            _CLOSING.add(task)
            task.add_done_callback(_CLOSING.discard)

    async def call(self, args: Any, session_id: str) -> dict[str, Any]:
        """One ``vision_analyze`` call: the reference's result."""
        self._read(self.config())
        if not isinstance(args, dict):
            return failure("arguments must be an object with image_url and question")
        source, question = args.get("image_url"), args.get("question")
        if not isinstance(source, str) or not source.strip():
            return failure("image_url must be a non-empty string")
        if question is not None and not isinstance(question, str):
            return failure("question must be a string")
        try:
            image = await self._image(source.strip(), session_id)
            analysis = await self._analyse(image, question or "", session_id)
        except VisionError as exc:
            return failure(str(exc))
        except ImageError as exc:
            return failure(str(exc))
        except Exception as exc:  # the model endpoint failed: said, and logged in full
            log.warning("vision_analyze for session %s failed", session_id or "-", exc_info=True)
            return failure(f"the vision model request failed: {exc}")
        if not analysis.strip():
            return failure("the vision model returned no text")
        if not source.strip().lower().startswith("attachment:"):
            # an image nobody in the conversation made may carry instructions: the description
            # of it is data, marked as such (an image the person attached is theirs)
            analysis = untrusted.mark(analysis, f"image:{source.strip()[:80]}")
        return {"success": True, "analysis": analysis}

    # --- where the image comes from --------------------------------------------------------

    async def _image(self, source: str, session_id: str) -> Image:
        lowered = source.lower()
        if lowered.startswith("data:"):
            return from_data_url(source, "the data: URL", MAX_BYTES)
        if lowered.startswith(("http://", "https://")):
            return checked(await self._download(source, session_id), source, MAX_BYTES)
        if lowered.startswith("attachment:"):
            return await self._attachment(source.split(":", 1)[1].strip(), session_id)
        if "://" in source:
            raise VisionError("only http(s) and data: URLs are fetched")
        return await asyncio.to_thread(self._file, source, session_id)

    def _file(self, raw: str, session_id: str) -> Image:
        """A file in the session's workspace (on a worker thread: disk I/O)."""
        workspace = self.files.workspace(session_id).resolve()
        path = Path(raw).expanduser()
        path = (workspace / path if not path.is_absolute() else path).resolve()
        if path != workspace and workspace not in path.parents:
            raise VisionError(f"{raw} is outside the workspace ({workspace}); copy it there first")
        try:
            _, data = read_bytes(self.files.guard, str(path), workspace, MAX_BYTES)
        except BadArgs as exc:
            raise VisionError(str(exc)) from None
        return checked(data, raw, MAX_BYTES)

    async def _attachment(self, which: str, session_id: str) -> Image:
        if not session_id:
            raise VisionError("attachment: needs a session")
        records = await self.store.run(self.store.messages.read, session_id, include_undone=False)
        urls = [i["url"] for r in records for i in r["images"]]
        if not urls:
            raise VisionError("no image has been attached to this conversation")
        if which == "last":
            return from_data_url(urls[-1], "the last attachment", MAX_BYTES)
        if not which.isdigit() or not 1 <= int(which) <= len(urls):
            raise VisionError(
                f"attachment:{which} does not exist (there are {len(urls)}: 1 to "
                f"{len(urls)}, or last)"
            )
        return from_data_url(urls[int(which) - 1], f"attachment {which}", MAX_BYTES)

    async def _download(self, url: str, session_id: str) -> bytes:
        """The URL's body, through the network policy tools have (``sandbox.network``)."""
        import aiohttp

        network = self.sandbox.settings.network
        if network == "off":
            raise VisionError("network access is off for tools (sandbox.network: off)")
        proxy = None
        egress = self.sandbox.egress
        if network == "allowlist":
            if not egress.running:
                raise VisionError(
                    "sandbox.network is allowlist but the egress proxy is not running"
                )
            proxy = egress.issue(session_id)
        try:
            timeout = aiohttp.ClientTimeout(total=self.download_timeout)
            async with (
                aiohttp.ClientSession(timeout=timeout, trust_env=False) as http,
                http.get(url, proxy=proxy.url() if proxy else None) as response,
            ):
                if response.status != 200:
                    why = (await response.content.read(300)).decode("utf-8", "replace")
                    raise VisionError(f"{url} answered HTTP {response.status}: {why.strip()}")
                chunks: list[bytes] = []
                async for chunk in response.content.iter_chunked(65536):
                    chunks.append(chunk)
                    if sum(map(len, chunks)) > MAX_BYTES:
                        raise VisionError(f"{url} is larger than {MAX_BYTES:,} bytes")
                data = b"".join(chunks)
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise VisionError(f"could not fetch {url}: {exc or type(exc).__name__}") from None
        finally:
            if proxy is not None:
                egress.revoke(proxy.user)
        return data

    # --- asking the model ------------------------------------------------------------------

    async def analyse(self, image: Image, question: str, session_id: str) -> str:
        """The vision model's answer about ``image`` (browser_vision's screenshots)."""
        self._read(self.config())
        return await self._analyse(image, question, session_id)

    async def _analyse(self, image: Image, question: str, session_id: str) -> str:
        messages = [
            {
                "role": "user",
                "content": [{"type": "text", "text": PROMPT + question}, image.part()],
            }
        ]
        options = {"max_tokens": MAX_TOKENS, "temperature": self.temperature}
        if self.base_url is None:  # the main model, through the agent's completion path
            done = await asyncio.wait_for(
                self.complete(
                    messages,
                    model=self.model,
                    options=options,
                    session_id=session_id,
                    aux_task="vision",
                ),
                self.timeout,
            )
            return done.content or ""
        if self.model is None:
            raise VisionError(
                "auxiliary.vision.base_url is set: name its model (auxiliary.vision.model)"
            )
        if self._client is None:
            self._client = ModelClient(
                ModelSettings(self.base_url, self.model, self.api_key, timeout=self.timeout)
            )
        client, model = self._client, self.model
        call = AuxiliaryCall("vision", model, "custom", self.base_url, session_id)
        done = await run_auxiliary(
            self.hooks,
            call,
            messages,
            lambda: client.stream_completion(messages, model=model, extra=options),
            options,
        )
        return done.content or ""


def register_vision(tools: ToolRegistry, vision: VisionTool) -> None:
    """Register ``vision_analyze`` (toolset ``vision``)."""

    async def handler(args: dict[str, Any], session_id: str = "", **_: Any) -> str:
        return json.dumps(await vision.call(args, session_id), ensure_ascii=False, indent=2)

    tools.register(
        "vision_analyze",
        TOOLSET,
        SCHEMA,
        handler,
        emoji="👁️",
        owner=BUILTIN,
        check_arguments=False,
    )
