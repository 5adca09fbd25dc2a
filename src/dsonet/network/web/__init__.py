"""The node's web page: what it holds, whom it trusts, what it refused (`page`), behind the token (`gate`)."""

from dsonet.network.web.gate import PageGate, page_cookie
from dsonet.network.web.page import SystemText, page_routes

__all__ = ["PageGate", "SystemText", "page_cookie", "page_routes"]
