"""Commands people type: slash commands (`registry.CommandRegistry`, built-in and plugin ones),
plugin CLI commands run inside the daemon for `hermesctl <name>` (`cli_runner`), and their RPC
methods (`service.CommandService`)."""
