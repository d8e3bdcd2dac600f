"""``hermes_cli.dashboard_auth`` for plugins: the dashboard auth provider interface.

A provider subclasses `DashboardAuthProvider` and registers with
``ctx.register_dashboard_auth_provider``. When ``http.auth_provider`` names it, the web page
offers its sign-in (``start_login``/``complete_login`` or ``complete_password_login``), checks
the page session with ``verify_session``/``refresh_session`` and ends it with
``revoke_session``; bearer tokens the token file lacks go to ``verify_token``
(docs/clients.md, "Tokens from a plugin"; docs/web.md, "Logging in with a provider"). The
objects live in ``hermesd.http.provider_api``; this module only gives them the reference's
import path.
"""

from .base import *  # noqa: F403
from .base import __all__ as __all__
