"""``hermes_cli.dashboard_auth`` for plugins: the token side of a dashboard auth provider.

hermesd has no dashboard login; its HTTP door asks the provider ``http.auth_provider`` names
about bearer tokens (``hermesd.http.auth_provider``). So a provider subclasses
`DashboardAuthProvider`, sets ``supports_token`` and answers ``verify_token`` with a
`TokenPrincipal` whose ``principal`` is ``owner`` or a login user's name. The login methods
of the reference's interface are never called here.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class TokenPrincipal:
    """Who a bearer token stands for: ``owner`` or a login user (a member)."""

    principal: str
    provider: str = ""
    scopes: tuple[str, ...] = ()


class ProviderError(Exception):
    """The provider's backing store cannot be reached (the request is refused)."""


class DashboardAuthProvider:
    """Base of a provider: ``name``, ``supports_token`` and ``verify_token``."""

    name: str = ""
    supports_token: bool = False

    def verify_token(self, *, token: str) -> TokenPrincipal | None:
        """The principal of ``token``, or None when this provider does not know it."""
        raise NotImplementedError(f"{type(self).__name__} does not verify tokens")
