"""Where a tool's subprocess runs: the sandbox around every command a tool starts.

``settings`` (the ``sandbox.*`` keys and the environment a tool gets), ``paths`` (what is
hidden, read-only or writable for one call), ``bwrap`` (bubblewrap's command line),
``landlock`` (the kernel's Landlock, and ``landlock_exec``, the small launcher that applies it),
``marker`` (the seccomp filter every tool process inherits, so the socket can tell it apart),
``confine`` (the mechanism chosen and the command line of one call), ``process`` (what the
daemon does to itself at start). Nothing here knows tools, sessions or the RPC layer.
"""
