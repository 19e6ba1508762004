from django.urls import path

from api import views

urlpatterns = [
    path("inbound/helpdesk", views.inbound_helpdesk, name="inbound-helpdesk"),
    path("sessions/<path:key>/messages", views.post_message, name="api-post-message"),
]
