"""Where a session's tools work: the one rule the file tools and the sandbox share.

The workspace is the session's own directory (its ``cwd`` column, migration v6) when it has
one, else the configured ``terminal.cwd``, else ``$HERMES_HOME/workspace``, which is created
private (0700) the first time it is needed. The path comes back absolute with symlinks
resolved, so it can be compared with other resolved paths. This module only names the
directory; what a tool may do inside or outside it is decided by its callers.
"""

from __future__ import annotations

import os
from pathlib import Path

DEFAULT_NAME = "workspace"


def resolve_workspace(home: Path, configured: str | None, session_cwd: str | None = None) -> Path:
    """The workspace directory, absolute and symlink-free; the default one is created 0700."""
    chosen = session_cwd or configured
    if chosen:
        return Path(os.path.realpath(Path(chosen).expanduser()))
    default = home / DEFAULT_NAME
    try:
        default.mkdir(mode=0o700)
        os.chmod(default, 0o700)  # mkdir's mode is narrowed by the umask, never widened
    except FileExistsError:
        pass
    return Path(os.path.realpath(default))
