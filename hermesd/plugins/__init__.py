"""The plugin host: discovery and manifests (`loader`, `manifest`), the `ctx` a plugin registers
through (`context`), loading, unloading and reloads (`host`), the threads plugin code runs on
(`workers`), the hook bus (`hooks`), skills (`skills`), tool declarations and their checks
(`tool_schema`), listing, linting and installing plugins (`listing`, `lint`, `install`), and
the plugins.*/tools.*/skills.* RPC methods (`service`, `admin`)."""
