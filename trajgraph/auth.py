"""Bearer API keys → tenants, shared by the HTTP API and the MCP server."""

from __future__ import annotations

import hmac


def tenant_for(authorization: str, keys: dict[str, str]) -> str | None:
    """The tenant of an ``Authorization: Bearer <key>`` header value, or None."""
    scheme, _, token = authorization.partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        return None
    for key, tenant in keys.items():
        # Constant-time comparison: response timing must not leak key prefixes.
        if hmac.compare_digest(key.encode(), token.encode()):
            return tenant
    return None
