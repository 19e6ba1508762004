"""Desk pages of the api app (the API itself is mounted from api/v1.py)."""

from django.urls import path

from api import desk

app_name = "api"

urlpatterns = [
    path("", desk.token_list, name="tokens"),
    path("<int:token_id>/revoke", desk.token_revoke, name="token_revoke"),
]
