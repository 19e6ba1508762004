from django.urls import path

from agents import api

urlpatterns = [
    path("inbound/helpdesk", api.inbound_helpdesk, name="inbound-helpdesk"),
    path("sessions/<path:key>/messages", api.post_message, name="api-post-message"),
]
