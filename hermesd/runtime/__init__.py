"""Runtime every layer uses: the bounded worker threads plugin and engine code runs on
(workers.py), the hook table and bus (hooks.py), plugin middleware (middleware.py), the session
a piece of work runs for (session.py) and the plain-YAML reader for plugin files
(plain_yaml.py). It knows nothing of tools, plugins' registration or the RPC layer."""
