"""Chat platforms: talk to the agent from Telegram, Matrix or a plugin's platform.

How an adapter plugs in (built-in and plugin adapters alike):

1. Subclass `hermesd.gateway.base.PlatformAdapter` (plugins: ``gateway.platforms.base.
   BasePlatformAdapter``, the same class). ``__init__(config, platform)`` gets a
   `PlatformConfig` (``token``; ``extra`` holds the section's other keys, e.g. ``base_url`` or
   ``homeserver``) and a `Platform` (``Platform("matrix")``). Implement ``connect() -> bool``
   (start receiving; call ``self._mark_connected()``), ``disconnect()``, ``send(chat_id,
   content, reply_to=None, metadata=None) -> SendResult`` (``metadata["thread_id"]``: the
   thread), and where the platform has them ``send_typing``, ``send_buttons`` (set
   ``supports_buttons = True``), ``edit_message``, ``send_image_file``, ``send_document``,
   ``set_commands``, ``add_reaction``/``set_thread_title`` (listed in ``supported_actions``,
   for ``ctx.platform_actions``). Set ``MAX_MESSAGE_LENGTH``.
2. For each incoming message build a `MessageEvent` with a `SessionSource` (platform,
   chat_id, chat_type dm|group|channel|thread, user_id, user_name, thread_id, message_id) and
   ``await self.handle_message(event)``: the gateway admits the sender, runs the command or
   turn, and sends the answer with ``send``. A pressed button: ``await
   self.handle_button(source, data)`` with the data of the `Button` pressed; the text returned
   is what to show for it.
3. Make it available: a built-in in ``hermesd.gateway.platforms.BUILTIN`` (a module with
   ``create_adapter(config)`` and ``check_requirements()``), a plugin with
   ``ctx.register_platform(name, label, adapter_factory, check_fn, ...)``. It runs when
   config.yaml has ``gateway.platforms.<name>`` (see docs/gateway.md).

Modules: `base` (the interface), `platforms` (which exist, configuration, adapters' states),
`core` (a message's way: hooks, admission, commands, turns, delivery), `chat` (a chat user as
an in-process RPC client), `users` (allow-lists, pairing), `sessions` (session keys), `split`
and `outbound` (sending long answers and files), `voice` (voice messages to text), `actions`
(``ctx.platform_actions`` on the adapters), `media` (the media folder pruned), `service`
(``gateway.*`` methods), and the built-in adapters (`telegram` with `telegram_format`, `matrix`
with its `matrix_*` helpers).
"""
