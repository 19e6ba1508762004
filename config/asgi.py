"""ASGI entry point: HTTP through Django, WebSockets through Channels."""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
django_asgi_app = get_asgi_application()

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler  # noqa: E402

from api.inbound_asgi import InboundHandler, handles  # noqa: E402
from api.mcp import mcp_app  # noqa: E402
from config.daphne import skip_form_parsing  # noqa: E402
from dashboard.middleware import StaticSecurityHeaders  # noqa: E402
from dashboard.origin import SameOriginValidator  # noqa: E402
from dashboard.routing import websocket_urlpatterns  # noqa: E402

# Daphne is the only web process (make run, docker-compose): it serves
# /static/ itself (the desk's CSS and JS, a few files) so that the CSP's
# script-src 'self' holds without a separate file server.
# Static responses get the pages' security headers (dashboard/middleware.py).
django_http = StaticSecurityHeaders(ASGIStaticFilesHandler(django_asgi_app))
# Twisted need not parse POST form bodies that Django parses anyway (config/daphne.py).
skip_form_parsing()
# The webhook and the messages APIs: Django without the browser's middleware,
# on a thread pool of its own (api/inbound_asgi.py).
inbound_http = InboundHandler()


async def http(scope, receive, send):
    """/mcp is the MCP server (api/mcp.py); the paths machines post bursts
    to go through inbound_http; everything else is Django."""
    if scope["path"] in ("/mcp", "/mcp/"):
        await mcp_app({**scope, "path": "/mcp"}, receive, send)
    elif handles(scope):
        await inbound_http(scope, receive, send)
    else:
        await django_http(scope, receive, send)


application = ProtocolTypeRouter(
    {
        "http": http,
        # Origin must be the desk's own scheme, host and port (no cross-site
        # or cross-port WebSocket hijacking: dashboard/origin.py), then the
        # session cookie; consumers check permissions.
        "websocket": SameOriginValidator(AuthMiddlewareStack(URLRouter(websocket_urlpatterns))),
    }
)
