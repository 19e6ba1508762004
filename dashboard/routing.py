from django.urls import path

from dashboard import consumers

websocket_urlpatterns = [
    path("ws/sessions/<int:session_id>/", consumers.SessionConsumer.as_asgi()),
    path("ws/desk/", consumers.DeskConsumer.as_asgi()),
    path("ws/approvals/", consumers.ApprovalsConsumer.as_asgi()),
    path("ws/presence/", consumers.PresenceConsumer.as_asgi()),
]
