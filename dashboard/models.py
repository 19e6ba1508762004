"""What the desk itself stores: which Django sessions each user is logged in with."""

from __future__ import annotations

from django.conf import settings
from django.db import models


class UserLogin(models.Model):
    """One login (a Django session key) of a user, so that logging out ends
    all of them at once (dashboard/revocation.py): Django's session table
    cannot be searched by user without decoding every row."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    session_key = models.CharField(max_length=40, unique=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        indexes = [models.Index(fields=["user"], name="userlogin_user_idx")]

    def __str__(self) -> str:
        return f"{self.user_id} {self.created_at:%Y-%m-%d %H:%M}"
