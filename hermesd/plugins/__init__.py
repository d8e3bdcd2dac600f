"""The plugin host: discovery and manifests (`loader`, `manifest`), the `ctx` a plugin registers
through (`context`), loading, unloading and reloads (`host`), the context-engine slot
(`context_engines`), memory-provider plugins (`memory_providers`), the reference modules plugins
import (`compat/`), listing, linting and installing plugins (`listing`, `lint`, `install`), and
the plugins.*/tools.*/skills.* RPC methods (`service`, `admin`). The threads plugin code runs on,
the hook bus and middleware are runtime (`hermesd/runtime/`); tool declarations and the skill
catalog belong to the tools (`hermesd/tools/schema.py`, `skill_catalog.py`)."""
