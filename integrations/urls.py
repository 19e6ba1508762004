from django.urls import path

from integrations import desk

app_name = "integrations"

urlpatterns = [
    path("webhooks/", desk.subscriptions, name="subscriptions"),
    path("webhooks/<int:subscription_id>/", desk.subscription, name="subscription"),
    path(
        "webhooks/<int:subscription_id>/active",
        desk.subscription_toggle,
        name="subscription_toggle",
    ),
    path("deliveries/<int:delivery_id>/resend", desk.delivery_resend, name="delivery_resend"),
]
