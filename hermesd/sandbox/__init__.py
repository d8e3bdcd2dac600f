"""Where a tool's subprocess runs: the sandbox around every command a tool starts.

``policy`` (what one call may see and write, the ``sandbox.*`` keys, the environment a tool
gets), ``confine`` (bubblewrap or Landlock, chosen once; the command line of one call),
``landlock_exec`` (the launcher that applies Landlock and the seccomp marker the socket
recognises, `hermesd.rpc.peer_trust`), ``allowlist``, ``egress`` and ``bridge``
(``sandbox.network: allowlist``: the host list, the daemon's proxy, and the relay inside a
bubblewrap sandbox), ``process`` (what the daemon does to itself at start),
``service`` (the ``status`` field). Nothing here knows tools, sessions or the RPC layer.
"""
